"""``walcast run``'s settings: the table, reading them, checking them, writing them out.

* :mod:`capture.config.settings`: the one table every setting is declared in (section, key,
  flag, type, default, help, secret or not); everything below is built from it;
* :mod:`capture.config.arguments`: ``walcast run``'s flags and ``--help``, made from the table;
* :mod:`capture.config.reading`: a TOML file, then ``WALCAST__<SECTION>__<KEY>`` environment
  variables, then flags, into one :class:`~capture.config.parsed.Parsed`;
* :mod:`capture.config.values`: one raw value checked and converted, "did you mean" for a
  misspelt key;
* :mod:`capture.config.parsed`: the settings as far as they are valid, with where each came
  from, and every problem found;
* :mod:`capture.config.model`: the result, :class:`~capture.config.model.DaemonConfig`;
* :mod:`capture.config.render`: ``--print-config`` and ``walcast.example.toml``.

Invariant: nothing here connects to a server or starts a thread; the daemon
(:mod:`capture.daemon`) imports this package, never the other way round.
"""
