"""Progress inside a round and start-up causes that survive Flower's error relay (issue 32).

A round of the main job is minutes of one node after another; :func:`send_and_track` reports
each reply as it arrives and a heartbeat every 15 s in between. A client that cannot start its
agent raises one marked line that the server finds in a Ray-sized, ANSI-coloured error reason.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pfedma_flwr.protocol.startup import (
    StartupCause,
    StartupFailed,
    parse_startup,
    startup_message,
)
from pfedma_flwr.server import progress as pg
from pfedma_flwr.server import progress_lines as pl
from strategies.delivery import send_and_track


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class _Grid:
    """push/pull grid whose node ``n`` replies at ``at[n]`` seconds (never if absent)."""

    pull_interval = 1.0

    def __init__(self, clock: _Clock, at: dict[int, float]) -> None:
        self.clock, self.at, self.sent = clock, at, {}

    def push_messages(self, msgs):
        for k, m in enumerate(msgs):
            self.sent[f"id{k}"] = m.metadata.dst_node_id
        return list(self.sent)

    def pull_messages(self, ids):
        out = []
        for mid in list(ids):
            node = self.sent[mid]
            if node in self.at and self.clock() >= self.at[node]:
                out.append(
                    SimpleNamespace(
                        metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=node)
                    )
                )
                del self.at[node]
        return out


def _msg(node: int):
    return SimpleNamespace(metadata=SimpleNamespace(dst_node_id=node))


def test_each_reply_and_a_heartbeat_every_15_s_are_reported():
    clock = _Clock()
    grid = _Grid(clock, {1: 10.0, 2: 50.0})  # node 3 never answers
    events = []
    got = send_and_track(
        grid,
        [_msg(1), _msg(2), _msg(3)],
        timeout=60,
        server_round=2,
        answers_of={1: 5, 2: 3, 3: 2},
        on_progress=events.append,
        clock=clock,
        sleep=clock.sleep,
    )
    assert len(got) == 2
    seen = [(e.to_dict()["event"], int(e.elapsed), e.answers, e.replied) for e in events]
    # reply at 10 s, heartbeats at 25 s and 40 s (15 s after the last news), reply at 50 s,
    # nothing more until the 60 s timeout, then the end
    assert seen == [
        ("reply", 10, 5, 1),
        ("wait", 25, 5, 1),
        ("wait", 40, 5, 1),
        ("reply", 50, 8, 2),
        ("done", 60, 8, 2),
    ]
    assert events[0].to_dict() == {
        "event": "reply",
        "round": 2,
        "replied": 1,
        "nodes": 3,
        "answers": 5,
        "answers_total": 10,
        "elapsed": 10.0,
        "node": 1,
        "answers_of": 5,
    }


def test_a_grid_without_push_and_pull_falls_back_to_send_and_receive():
    class Old:
        def push_messages(self, msgs):
            raise NotImplementedError

        def send_and_receive(self, msgs, timeout=None):
            return [SimpleNamespace(metadata=SimpleNamespace(src_node_id=7))]

    events = []
    out = send_and_track(
        Old(), [_msg(7)], timeout=5, server_round=1, answers_of={7: 4}, on_progress=events.append
    )
    assert len(out) == 1 and [(e.done, e.answers) for e in events] == [(True, 4)]


def test_delivery_lines_say_who_replied_and_how_far_the_round_is():
    acc = pl.RunningAccuracy(total=20)
    reply = {
        "event": "reply",
        "round": 1,
        "replied": 3,
        "nodes": 8,
        "answers": 15,
        "answers_total": 40,
        "elapsed": 85.2,
        "client": "partition-3",
        "answers_of": 5,
    }
    assert pl.delivery_line(reply, acc) == (
        "[pfedma] round 1: partition-3 replied (5 answers) | 15/40 answers from 3/8 clients "
        "after 1 min 25 s | 0/20 queries done, acc -"
    )
    wait = {"event": "wait", "round": 0, "replied": 1, "nodes": 8, "elapsed": 30}
    assert pl.delivery_line(wait, acc).startswith(
        "[pfedma] handshake: waiting for 7 clients | 1/8 clients after 30 s"
    )


def test_the_servers_own_progress_is_log_lines():
    lines: list[str] = []
    rp = pg.RoundProgress(total=2, log=lines.append)
    rp.delivery(
        {
            "event": "reply",
            "round": 1,
            "replied": 1,
            "nodes": 2,
            "answers": 1,
            "answers_total": 2,
            "elapsed": 3,
            "client": "p0",
            "answers_of": 1,
        }
    )
    rp.query_done({"query_id": "q0", "benchmark": "gsm8k", "correct": True, "rounds": 1})
    rp.round_done(1, {"metrics": {"select/num_queries": 1}})
    assert [ln.split(":")[0] for ln in lines] == [
        "[pfedma] round 1",
        "[pfedma] query 1/2 gsm8k/q0",
        "[pfedma] round 1",
    ]
    assert "p0 replied (1 answer) |" in lines[0]
    quiet = pg.RoundProgress(total=2, enabled=False, log=lines.append)
    quiet.query_done({"correct": False})
    assert len(lines) == 3 and quiet.acc.done == 1


RAY_REASON = (
    "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\x1b[36mray::ClientAppActor"
    '.run()\x1b[39m (pid=31245, ip=192.0.2.2)\\n  File "x.py", line 3\\n    raise '
    "RuntimeError(startup_message(...))\\nRuntimeError: agent start-up failed on client p1 "
    "[generation]: openai backend at http://127.0.0.1:9/v1 (model 'm'): cannot connect to the "
    "endpoint ([Errno 111] Connection refused)\\n\\nThe above exception ...'>"
)


def test_the_cause_is_found_in_a_ray_error_reason():
    c = parse_startup(RAY_REASON)
    assert c == StartupCause(
        "p1",
        "generation",
        "openai backend at http://127.0.0.1:9/v1 "
        "(model 'm'): cannot connect to the endpoint ([Errno 111] "
        "Connection refused)",
    )
    assert parse_startup("<class 'RuntimeError'>:<'boom'>") is None
    msg = startup_message("p0", "config", ValueError("bad\nnode   config"))
    assert msg == "agent start-up failed on client p0 [config]: bad node config"
    assert parse_startup(f"<class 'RuntimeError'>:<'{msg}'>").cause == "bad node config"
    with pytest.raises(ValueError, match="kind"):
        startup_message("p0", "oops", "x")


def test_startup_failed_groups_clients_by_cause_and_sets_the_status():
    dead = StartupCause("p0", "generation", "endpoint down")
    e = StartupFailed(
        started=1,
        asked=4,
        needed=2,
        causes={
            10: dead,
            11: StartupCause("p1", "generation", "endpoint down"),
            12: StartupCause("p2", "config", "bad node config"),
            13: "<junk reason>",
        },
    )
    assert e.status == "failed:generation"
    assert e.cause == (
        "only 1 of 4 nodes started their agent (need strategy.min_nodes=2): "
        "clients p0, p1: endpoint down; client p2: bad node config; client "
        "node 13: <junk reason>"
    )
    assert (
        StartupFailed(
            started=0, asked=2, needed=2, causes={1: StartupCause("p0", "config", "x")}
        ).status
        == "failed"
    )
    # node ids are random: a lower id on p1 must not reorder the names
    swapped = StartupFailed(
        started=0,
        asked=2,
        needed=2,
        causes={
            7: StartupCause("p1", "generation", "down"),
            9: StartupCause("p0", "generation", "down"),
        },
    )
    assert swapped.cause.endswith("clients p0, p1: down")


def test_the_launcher_says_the_run_is_still_going_after_25_quiet_seconds(tmp_path):
    lines: list[str] = []
    live = pg.LiveProgress(output_dir=tmp_path, emit=lines.append)
    t0 = live._started
    live.still_running(now=t0 + 24)
    assert lines == []
    live.still_running(now=t0 + 63)  # Ray and the ServerApp starting: the 63 s measured gap
    assert lines == [
        "[pfedma] still running after 1 min 03 s: starting Ray, the ServerApp and the agents"
    ]
    live.still_running(now=t0 + 70)  # 25 s from the last line, not from the start
    assert len(lines) == 1
