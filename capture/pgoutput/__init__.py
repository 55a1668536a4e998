"""The pgoutput protocol: message classes and a decoder that turns bytes into them."""

from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import UNCHANGED_TOAST, MessageType, UnchangedToast

__all__ = ["UNCHANGED_TOAST", "MessageType", "PgOutputDecoder", "UnchangedToast"]
