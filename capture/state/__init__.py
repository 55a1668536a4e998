"""Everything walcast persists and reads back, and whose it is.

walcast keeps its state in compacted Kafka topics, keyed by the source it describes and
carrying the slot's generation, so two sources on one Kafka, or a slot made again, never
read each other's state. Each record has one module here:

* :mod:`capture.state.identity`: whose state it is, :class:`SourceIdentity`
  (``<system identifier>/<database>/<slot>``), the key of every record below and the
  ``walcast.source`` header of every message;
* :mod:`capture.state.progress`: a load's progress per table and the slot's generations
  (``walcast.snapshots``), with a memory store for runs that keep nothing;
* :mod:`capture.state.offsets`: the exactly-once offsets record of a source's last
  committed unit (``walcast.offsets``), written inside the Kafka transaction it describes;
* :mod:`capture.state.compacted`: the one reader of these topics (read whole,
  ``read_committed``, the newest value of each key).

Decision (the issue that asked for this package named the layout announce records too):
the layout record's shape stays with the encoders (:mod:`capture.formats.layout`): it is
rendered from a table the way IBM delimited renders its columns, and this package sits
below the formats (a module here importing one there would tie the two folders in a
circle). It is written by the Kafka sink (``KafkaSink.announce``) and read by the Spark
jobs (``pipeline/layouts.py``), never read back by walcast.

Invariant: nothing here imports the sinks, the loads or the daemon; those import this.
"""
