"""What every Kafka client of walcast shares: librdkafka's logs and errors, and security.

* :mod:`capture.kafka.client`: librdkafka's log lines through structlog, its errors as
  walcast's one-line errors, the ``security.protocol`` watch;
* :mod:`capture.kafka.security`: the ``[kafka]`` security settings for every client and
  what a refusal of them (SASL, TLS, ACLs) means, each as one line.

Invariant: these modules make no sink and keep no state; the sinks (:mod:`capture.sinks`),
the state readers (:mod:`capture.state`), ``walcast consume`` and the Spark jobs' preflight
import them, never the other way round.
"""
