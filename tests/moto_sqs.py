"""moto's SQS sending to and receiving from a long queue in time independent of its length.

moto computes a queue's attributes whenever it needs one of them, and that
counts every message in the queue (visible, in flight, delayed), several times
over. SendMessage does it to read `ContentBasedDeduplication`; ReceiveMessage
does it for every message it hands out, to read `MessageRetentionPeriod`. So
filling or draining a queue of N messages costs O(N^2): the resume requests of
a burst of 2,000 runs take minutes.

`uncounted_sends_and_receives()` reads the retention period where moto keeps it
(the same number), and while a SendMessage runs gives its queue's message counts
as 0 (it reads only `ContentBasedDeduplication` from them, and answers none).
What moto answers is unchanged: GetQueueAttributes still counts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_COUNTS = ("approximate_number_of_messages", "approximate_number_of_messages_delayed",
           "approximate_number_of_messages_not_visible")


@contextmanager
def uncounted_sends_and_receives() -> Iterator[None]:
    from moto.core.utils import unix_time
    from moto.sqs.models import Queue, SQSBackend

    send_message = SQSBackend.send_message
    # The queue a SendMessage on this thread is sending to.
    sending = threading.local()

    def within_retention(backend: Any, queue_name: str, message: Any) -> bool:
        retention_period = backend.get_queue(queue_name).message_retention_period
        return bool(retention_period + message.sent_timestamp / 1000 > unix_time())

    def send_uncounted(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        sending.queue = backend.get_queue(queue_name)
        try:
            return send_message(backend, queue_name, *args, **kwargs)
        finally:
            sending.queue = None

    def uncounted_while_sending(count: Any) -> property:
        def value(queue: Any) -> Any:
            return 0 if getattr(sending, "queue", None) is queue else count.fget(queue)
        return property(value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SQSBackend, "is_message_valid_based_on_retention_period",
                      within_retention)
        patch.setattr(SQSBackend, "send_message", send_uncounted)
        for name in _COUNTS:
            patch.setattr(Queue, name, uncounted_while_sending(getattr(Queue, name)))
        yield
