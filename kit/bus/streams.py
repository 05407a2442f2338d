"""The bus's streams and durable consumers: created (or updated to their declared config) as
code, and their progress and dead letters read back for `engram status` and the metrics."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import api
from nats.js.errors import APIError, NotFoundError

from contracts.subjects import ConsumerSpec, StreamSpec
from kit.bus.connection import Connection

__all__ = ["ConsumerState", "Streams"]

STREAM_NAME_IN_USE = 10058


@dataclass
class ConsumerState:
    """Progress of one durable consumer, for `engram status`."""

    stream: str
    durable: str
    delivered: int
    ack_floor: int
    pending: int
    ack_pending: int
    redelivered: int

def _stream_config(spec: StreamSpec, replicas: int) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy.WORK_QUEUE if spec.retention == "workqueue" else api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        duplicate_window=spec.duplicate_window_s,
        max_age=spec.max_age_s or None,
        max_msgs=spec.max_msgs or None,
        max_bytes=spec.max_bytes or None,
        num_replicas=replicas,
        description=spec.description,
        allow_direct=True,
    )


def _consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=spec.durable,
        description=spec.description,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait_s,  # for every delivery: retry delays go with each NAK (spec.backoff_s)
        max_deliver=spec.max_deliver,
        backoff=None,
        filter_subject=spec.filter_subject,
        max_ack_pending=spec.max_ack_pending,
        inactive_threshold=spec.inactive_threshold_s,
    )

class Streams(Connection):
    """Streams and consumers of the namespace."""

    async def ensure_streams(self, replicas: int = 1) -> None:
        """Create (or update to the declared config) every stream of the namespace."""
        for spec in self.names.streams():
            config = _stream_config(spec, replicas)
            try:
                await self.js.add_stream(config)
            except APIError as exc:
                if exc.err_code != STREAM_NAME_IN_USE:
                    raise
                await self.js.update_stream(config)

    async def delete_streams(self) -> int:
        """Delete every stream of the namespace — the event log included (tests and benchmarks
        clean up with it; nothing in Engram calls it). Returns how many existed."""
        deleted = 0
        for spec in self.names.streams():
            try:
                await self.js.delete_stream(spec.name)
                deleted += 1
            except NotFoundError:
                pass
        return deleted

    async def ensure_consumer(self, spec: ConsumerSpec) -> None:
        """Create the durable consumer, or update its settings when it exists."""
        await self.js.add_consumer(spec.stream, _consumer_config(spec))

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        try:
            info = await self.js.consumer_info(stream, durable)
        except NotFoundError:
            return None
        return ConsumerState(
            stream=stream,
            durable=durable,
            delivered=info.delivered.stream_seq if info.delivered else 0,
            ack_floor=info.ack_floor.stream_seq if info.ack_floor else 0,
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
        )

    async def dead_letter_counts(self) -> dict[str, int]:
        """Dead letters kept in the dead-letter stream, by the durable consumer that gave up on them."""
        info = await self.js.stream_info(self.names.dead_letter_stream, subjects_filter=f"{self.names.namespace}.dlq.>")
        counts: dict[str, int] = {}
        for subject, n in (info.state.subjects or {}).items():
            durable = subject.rsplit(".", 1)[-1]
            counts[durable] = counts.get(durable, 0) + int(n)
        return counts
