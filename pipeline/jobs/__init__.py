"""``spark-submit`` entry points: ``pipeline/jobs/normalize.py`` and ``materialize.py``.

They take the same arguments as ``walcast spark normalize|materialize`` and use the
session spark-submit configured (its ``--master``, ``--packages`` or ``--jars``).
"""
