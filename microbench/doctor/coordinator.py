"""The coordinator: checks the ranks in, walks the layers with them, judges each, names who did not finish, prints
and records the verdict, and ends the ranks.

It runs in the parent (``--np``, ``-- LAUNCHER``: a thread beside the launcher) or in a process rank 0 forked
(launched directly). A layer ends when every rank has reported it, or when it cannot end well:

- nothing moved for ``--timeout`` seconds (no rank reported a step or finished): the ranks still in the layer are
  named, those behind the others (fewer steps taken) as the ones holding it up, the others as waiting for them;
  where the ranks still in the layer stand at different steps, a third of ``--timeout`` without a move is enough
  (``Settings.behind_after``): a rank that has not taken a step every other rank took holds the layer up;
- a rank's connection closed (the process ended), a rank raised, or a pair did not answer: a second of grace for
  the reports that come with it, then the layer's verdict;
- the launcher exited (with a parent), or a signal came (Ctrl-C, a time limit's SIGTERM): what is known is said.

So a hang never ends silent: the verdict names host, rank and layer from what the other ranks reported.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass

from microbench.doctor import bandwidth, launch_check, mpi_check, network, pairs, placement, software, torch_check
from microbench.doctor.job import Job, RankInfo
from microbench.doctor.launch_check import LauncherState
from microbench.doctor.layers import LAYERS, Finding, Layer, LayerResult, hosts_phrase, ranks_phrase
from microbench.doctor.plane import Server, encode
from microbench.doctor.settings import Settings, settings_of
from microbench.errors import EXIT_INTERNAL, EXIT_USAGE, UsageError

GRACE_S = 1.0  #: after a rank ends, raises or reports a pair that did not answer: wait this long for the rest


@dataclass
class _Progress:
    layer: int = 1
    step: str = "checked in"
    seq: int = 0
    at: float = 0.0


class Coordinator:
    def __init__(self, server: Server, token: str, settings: Settings, expected: int | None = None,
                 launcher: LauncherState | None = None):
        self.server, self.token, self.s = server, token, settings
        self.job = Job(expected=expected)
        self.launcher = launcher
        self.conn_rank: dict[int, int] = {}
        self.progress: dict[int, _Progress] = {}
        self.done: dict[int, dict[int, dict]] = {}
        self.failed_steps: dict[int, list[dict]] = {}
        self.gone: dict[int, tuple[float, int]] = {}
        self.refused: list[Finding] = []
        self.layer = 1
        self.interrupted: str | None = None
        self.results: list[LayerResult] = []
        self.stalled: dict[int, list[int]] = {}  #: per layer, the ranks named as holding it up
        self.t0 = time.monotonic()
        self.run_id = uuid.uuid4().hex[:12]
        self.end_launcher = None  #: set by the parent: ends the launcher's processes
        self.on_verdict = None  #: set by the parent: called once the verdict is printed, before the ranks stop

    # -- events ---------------------------------------------------------------------------------
    def post(self, kind: str, value) -> None:
        """From another thread: the launcher exited (``launcher``, status) or a signal came (``signal``, name)."""
        self.server.events.put((kind, None, value))

    def _pump(self, timeout: float) -> None:
        try:
            event = self.server.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(*event)
            try:
                event = self.server.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, kind: str, conn, message) -> None:
        now = time.monotonic()
        if kind == "launcher":
            if self.launcher is not None:
                self.launcher.status, self.launcher.seconds = int(message), now - self.t0
            return
        if kind == "signal":
            self.interrupted = message
            return
        if kind == "closed":
            rank = self.conn_rank.pop(conn, None)
            if rank is not None:
                self.gone[rank] = (now, self.layer)
            return
        k = message.get("k")
        if k == "hello":
            self._hello(conn, message, now)
            return
        rank = self.conn_rank.get(conn)
        if rank is None:
            return
        layer = int(message.get("layer", 0))
        if k == "step":
            self.progress[rank] = _Progress(layer, str(message.get("step")), int(message.get("seq", 0)), now)
            facts = message.get("facts") or {}
            if facts.get("failed_pair"):
                self.failed_steps.setdefault(layer, []).append(
                    {"rank": rank, "pair": facts["failed_pair"], "stage": facts.get("stage", ""), "at": now})
        elif k == "done":
            self.done.setdefault(layer, {})[rank] = message.get("data") or {}
            self.progress[rank] = _Progress(layer, "done", self.progress.get(rank, _Progress()).seq, now)

    def _hello(self, conn: int, m: dict, now: float) -> None:
        if m.get("token") != self.token:
            self.refused.append(Finding(f"a process from another launch reached the doctor (pid {m.get('pid')} on "
                                        f"{m.get('host')}): two doctors on one port, or a stale rank", note=True))
            return
        rank = int(m["rank"])
        if rank in self.job.ranks:
            self.refused.append(Finding(f"two processes claim rank {rank} ({self.job.host_of(rank)} and "
                                        f"{m.get('host')}): the launcher started two jobs, or the ranks read "
                                        f"another launcher's variables", host=str(m.get("host")), ranks=[rank]))
            return
        self.conn_rank[conn] = rank
        self.job.add(RankInfo(rank, str(m.get("host")), int(m.get("pid", 0)), conn, m.get("local_rank"),
                              m.get("local_size"), m.get("size"), m.get("launcher"), m.get("view") or {},
                              float(m.get("clock_s", time.time())) - time.time()))
        self.progress[rank] = _Progress(1, "checked in", 0, now)

    # -- the walk -------------------------------------------------------------------------------
    def run(self) -> int:
        """Walk the layers; returns the exit status (0 every layer passed, 1 one failed, 128 + N on signal N; 3 a
        bug in the doctor, said in one line, with every rank told to stop)."""
        try:
            return self._walk()
        except Exception as exc:  # noqa: BLE001 - the ranks must not wait for a coordinator that is gone
            print(f"microbench: internal error: doctor: {type(exc).__name__}: {exc} (a bug)", file=sys.stderr,
                  flush=True)
            if os.environ.get("MICROBENCH_DEBUG", "") not in ("", "0"):
                traceback.print_exc()
            self._stop_ranks(EXIT_INTERNAL)
            if self.end_launcher is not None:
                self.end_launcher()
            return EXIT_INTERNAL

    def _walk(self) -> int:
        if not self.s.json:
            self._say(f"microbench doctor: {self._expecting()}, timeout {self.s.timeout:g} s per layer "
                      f"(launch {self.s.launch_timeout:g} s)")
        result = self._launch()
        self._record_result(result)
        failed = result if result.status == "fail" else None
        for layer in LAYERS[1:]:
            if failed is not None:
                self.results.append(LayerResult(layer, "not_run", f"not run: layer {failed.layer.number} failed"))
                continue
            why = self._skip_reason(layer)
            result = LayerResult(layer, "skipped", why) if why else self._layer(layer)
            self._record_result(result)
            if result.status == "fail":
                failed = result
        if not self.s.json and failed is not None and failed.layer.number < len(LAYERS):
            rest = failed.layer.number + 1
            self._say(f"   layer{'s' if rest < len(LAYERS) else ''} {rest}{f'-{len(LAYERS)}' if rest < len(LAYERS) else ''} not run")
        return self._finish()

    def _expecting(self) -> str:
        who = f"{self.launcher.name}" if self.launcher and self.launcher.command else "the launcher"
        return f"{self.job.expected} rank(s) expected from {who}" if self.job.expected else f"ranks from {who}"

    def _launch(self) -> LayerResult:
        deadline = self.t0 + self.s.launch_timeout
        while True:
            expected = self._expected()
            if expected and len(self.job.ranks) >= expected:
                break
            if self.launcher is not None and self.launcher.status is not None:
                self._drain(0.5)  # hellos on their way
                break
            if self.interrupted or time.monotonic() >= deadline:
                break
            self._pump(0.1)
        seconds = time.monotonic() - self.t0
        if self.job.expected is None:
            self.job.expected = self._expected()
        result = launch_check.judge(self.job, self.launcher, seconds, self.refused)
        gone = self._gone_findings(1)
        if gone:
            result = _failed(result, gone)
        return self._interrupted(result)

    def _expected(self) -> int | None:
        if self.job.expected:
            return self.job.expected
        sizes = {i.size for i in self.job.ranks.values() if i.size}
        return next(iter(sizes)) if len(sizes) == 1 else None

    def _skip_reason(self, layer: Layer) -> str | None:
        if layer.name in self.s.skip:
            return "skipped (--skip)"
        under_torchrun = self.job.ranks[min(self.job.ranks)].launcher == "torchrun"
        if layer.name in ("mpi", "bandwidth") and under_torchrun:
            return "skipped: torchrun starts no MPI job (the pairs are measured over MPI)"
        if layer.name == "bandwidth" and "mpi" in self.s.skip:
            return "skipped: measured over MPI, and layer 3 (mpi) was skipped"
        if layer.name == "torch":
            versions = {rep.get("torch") for rep in self.done.get(2, {}).values()}
            if versions == {None}:
                return "skipped: torch is not installed on any rank"
        return None

    def _layer(self, layer: Layer) -> LayerResult:
        self.layer = layer.number
        start = time.monotonic()
        reports, findings = self._pass(layer, start)
        complete = not _failures(findings) and len(reports) == len(self.job.ranks)
        if complete and layer.name == "bandwidth":
            recheck = bandwidth.suspects(reports, self.job)
            if recheck:  # noise on a shared node slows a pair now and then: measure the suspects again, alone
                again, findings = self._pass(layer, time.monotonic(), {"recheck": recheck})
                reports = bandwidth.merged(reports, again)
                complete = not _failures(findings) and len(again) == len(self.job.ranks)
        seconds = time.monotonic() - start
        if complete or (layer.name in ("mpi", "bandwidth") and self.failed_steps.get(layer.number)):
            judged = self._judge(layer, reports)
            silent = [f for f in findings if f.ranks and set(f.ranks) <= set(self.stalled.get(layer.number, ()))]
            findings = silent + judged.findings + [f for f in findings if f not in silent]  # the cause first
            if complete:
                judged.seconds = seconds
                return self._interrupted(judged)
        first = _failures(findings)
        result = LayerResult(layer, "fail", first[0].what if first else "did not complete", findings,
                             seconds=seconds, next=self._next(layer, findings))
        return self._interrupted(result)

    def _pass(self, layer: Layer, start: float, extra: dict | None = None) -> tuple[dict[int, dict], list[Finding]]:
        """One go of ``layer`` to every rank, until it can be judged: (the reports without an error, what went
        wrong: ranks that ended, raised, or did not finish)."""
        self.done[layer.number] = {}
        shared, own = self._context(layer, extra or {})
        ranks = sorted(r for r in self.job.ranks if r not in self.gone)
        first = [0] if layer.name == "network" and own.get(0, {}).get("listen") else []
        for rank in first:
            self._go(layer, rank, shared, own)
        if first:  # rank 0 opens the rendezvous port before the others try it
            self._until(layer, start, lambda: self.progress[0].seq >= 1 or 0 in self.done.get(layer.number, {}))
        for rank in ranks:
            if rank not in first:
                self._go(layer, rank, shared, own)
        why = self._until(layer, start, lambda: False)
        reports = self.done.get(layer.number, {})
        findings = self._gone_findings(layer.number)
        findings += [Finding(f"{self.job.host_of(r)}: rank {r}: {rep['error']}", host=self.job.host_of(r), ranks=[r])
                     for r, rep in sorted(reports.items()) if "error" in rep]
        pending = [r for r in self.job.ranks if r not in reports and r not in self.gone]
        if why == "trouble":  # still busy when a rank ended, raised or a pair failed: a consequence, not a cause
            findings = self._silent_partners(layer, pending, start) + findings
            if pending:
                findings.append(Finding(f"{len(pending)} rank(s) were still in layer {layer.number} when it ended",
                                        note=True))
        else:
            findings += self._pending_findings(layer, pending, start)
        return {r: rep for r, rep in reports.items() if "error" not in rep}, findings

    def _until(self, layer: Layer, start: float, extra) -> str:
        """Pump events until the layer can be judged (see the module docstring), or ``extra()`` holds; returns why
        it stopped: complete, trouble (a rank ended or raised, a pair did not answer), launcher, signal, stalled."""
        n = layer.number
        while True:
            now = time.monotonic()
            reports = self.done.get(n, {})
            if extra():
                return "complete"
            alive = [r for r in self.job.ranks if r not in self.gone]
            if all(r in reports for r in alive) and not any(t >= start for t, _ in self.gone.values()):
                return "complete"
            trouble = [t for t, _ in self.gone.values() if t >= start]
            trouble += [s["at"] for s in self.failed_steps.get(n, []) if s["at"] >= start]
            if any("error" in rep for rep in reports.values()):
                trouble.append(min(self.progress[r].at for r, rep in reports.items() if "error" in rep))
            if trouble and now - min(trouble) > GRACE_S:
                return "trouble"
            if self.launcher is not None and self.launcher.status is not None:
                self._drain(GRACE_S)
                return "launcher"
            if self.interrupted:
                return "signal"
            moved = max([start] + [p.at for r, p in self.progress.items() if p.layer == n and r not in self.gone])
            if now - moved > self.s.timeout:
                return "stalled"
            if now - moved > self.s.behind_after and self._some_behind(n, alive, reports):
                return "stalled"
            self._pump(0.1)

    def _some_behind(self, n: int, alive: list[int], reports: dict[int, dict]) -> bool:
        """Whether the ranks still in layer ``n`` stand at different steps: those behind hold the others up (every
        step of a layer is one the others wait for), so they are named after ``behind_after``, not ``timeout``."""
        seqs = {self.progress[r].seq for r in alive if r not in reports and self.progress[r].layer == n}
        return len(seqs) > 1

    def _drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._pump(0.05)

    def _go(self, layer: Layer, rank: int, shared: dict[str, bytes], own: dict[int, dict]) -> None:
        info = self.job.ranks[rank]
        mine = own.get(rank, {})
        ctx = shared["leader" if mine.get("index") is not None else "other"]
        data = (b'{"k":"go","layer":' + str(layer.number).encode() + b',"own":' + encode(mine)[:-1] + b',"ctx":'
                + ctx + b"}\n")
        self.progress[rank] = _Progress(layer.number, f"layer {layer.number} started", 0, time.monotonic())
        self.server.send(info.conn, data)

    def _context(self, layer: Layer, extra: dict) -> tuple[dict[str, bytes], dict[int, dict]]:
        """What every rank needs for ``layer`` (encoded once: the leaders' list goes only to leaders) and what one
        rank needs of its own."""
        s = self.s
        base = {"timeout": s.timeout, "pair_timeout": s.pair_timeout, "world": len(self.job.ranks), **extra}
        own: dict[int, dict] = {}
        leader_extra: dict = {}
        if layer.name in ("mpi", "bandwidth"):
            nodes = self.job.nodes()
            leader_extra["leaders"] = pairs.pack_ranks(nodes.leaders)
            own = {rank: {"index": k} for k, rank in enumerate(nodes.leaders)}
        if layer.name == "bandwidth":
            base.update(bytes=s.size, pair_timeout=s.transfer_timeout)
        if layer.name == "network":
            store = self.store()
            base.update(store=list(store), connect_timeout=min(5.0, s.timeout / 2))
            first_of_host: dict[str, int] = {}
            for rank in sorted(self.job.ranks):
                first_of_host.setdefault(self.job.host_of(rank), rank)
            own = {rank: {"node_facts": True} for rank in first_of_host.values()}
            if not self._under_torchrun():
                own.setdefault(0, {})["listen"] = store[1]
        if layer.name == "torch":
            base.update(store=list(self.store()), backend=self._backend(),
                        import_timeout=max(s.timeout, s.launch_timeout))
        shared = {"other": encode(base)[:-1], "leader": encode({**base, **leader_extra})[:-1]}
        return shared, own

    def _under_torchrun(self) -> bool:
        return self.job.ranks[min(self.job.ranks)].launcher == "torchrun"

    def store(self) -> tuple[str, int]:
        """The torch.distributed rendezvous (host, port): torchrun's own under torchrun; else MASTER_ADDR or rank
        0's hostname, and --store-port, MASTER_PORT or 29500."""
        zero = self.job.ranks[min(self.job.ranks)]
        host = zero.view.get("MASTER_ADDR") or zero.host
        port = self.s.store_port or int(zero.view.get("MASTER_PORT") or network.DEFAULT_STORE_PORT)
        if self._under_torchrun():
            port = int(zero.view.get("MASTER_PORT") or port)
        return host, port

    def _backend(self) -> str:
        gpus = [rep.get("gpu") for rep in self.done.get(5, {}).values()]
        nccl = [rep.get("nccl") for rep in self.done.get(2, {}).values()]
        everywhere = bool(gpus) and all(gpus) and all(nccl)
        return torch_check.choose_backend(self.s.torch_backend, everywhere)

    def _judge(self, layer: Layer, reports: dict[int, dict]) -> LayerResult:
        n = len(self.job.ranks)
        if layer.name == "software":
            return software.judge(reports, self.job)
        if layer.name == "mpi":
            return mpi_check.judge(reports, self.job, n, self._pairs_failed(layer), self.job.nodes().labels)
        if layer.name == "network":
            listen_error = (reports.get(0) or {}).get("listen_error")
            return network.judge(reports, self.job, self.store(), self.s.iface, listen_error)
        if layer.name == "placement":
            return placement.judge(reports, self.job)
        if layer.name == "torch":
            return torch_check.judge(reports, self.job, n)
        return bandwidth.judge(reports, self.job, self._pairs_failed(layer), self.s.size)

    def _pairs_failed(self, layer: Layer) -> list[dict]:
        """The failed pairs reported during the layer, within the grace after the first (what came later may be a
        cascade: a partner late because it waited for the failed one)."""
        found = self.failed_steps.get(layer.number, [])
        if not found:
            return []
        first = min(s["at"] for s in found)
        return [s for s in found if s["at"] - first <= GRACE_S + 0.5]

    # -- naming who did not finish -------------------------------------------------------------
    def _gone_findings(self, number: int) -> list[Finding]:
        out = []
        gone = {r: layer for r, (_, layer) in self.gone.items() if layer == number}
        for host, ranks in self.job.by_host(gone).items():
            out.append(Finding(f"{host}: {ranks_phrase(ranks)} ended during layer {number} (their connection to the "
                               f"doctor closed: the process exited or was killed)", host=host, ranks=ranks))
        if out and self.launcher is not None and self.launcher.status is not None:
            out.append(Finding(f"{self.launcher.name} exited with status {self.launcher.status}", note=True))
        return out

    def _silent_partners(self, layer: Layer, pending: list[int], start: float) -> list[Finding]:
        """Ranks whose partners reported no answer from them while they said nothing at all in the layer (no step
        since it started): the silent end of a failed pair is the one named, not the end that waited."""
        leaders = self.job.nodes().leaders
        reported = [s for s in self.failed_steps.get(layer.number, []) if s["at"] >= start]
        waiting: dict[int, list[int]] = {}
        for s in reported:
            me, other = s["pair"]
            if not 0 <= other < len(leaders):
                continue
            rank = leaders[other]
            p = self.progress.get(rank)
            if rank in pending and p is not None and p.layer == layer.number and p.step.startswith("layer "):
                waiting.setdefault(rank, []).append(s["rank"])
        if not waiting:
            return []
        self.stalled[layer.number] = sorted(waiting)
        now = time.monotonic()
        out = []
        for host, ranks in self.job.by_host(waiting).items():
            partners = sorted({p for r in ranks for p in waiting[r]})
            still = now - max(self.progress[r].at for r in ranks)
            out.append(Finding(f"{host}: {ranks_phrase(ranks)} said nothing in layer {layer.number} ({layer.name}) "
                               f"for {still:.0f} s since it started, and its partner(s) got no answer from it "
                               f"({hosts_phrase(self.job.by_host(partners))})", host=host, ranks=ranks))
        return out

    def _pending_findings(self, layer: Layer, pending: list[int], start: float) -> list[Finding]:
        if not pending:
            return []
        waited = time.monotonic() - max(p.at for r, p in self.progress.items() if r in pending)
        seqs = {r: self.progress[r].seq if self.progress[r].layer == layer.number else -1 for r in pending}
        low, high = min(seqs.values()), max(seqs.values())
        finished = [r for r in self.done.get(layer.number, {})]
        if low == high and finished:  # the others got through: these are the ones holding the layer up
            self.stalled[layer.number] = list(pending)
            where = self._where(pending[0], layer)
            return [Finding(f"{host}: {ranks_phrase(ranks)} stopped {where} for {waited:.0f} s, while the "
                            f"{len(finished)} other rank(s) finished layer {layer.number}", host=host, ranks=ranks)
                    for host, ranks in self.job.by_host(pending).items()]
        if low == high:
            where = self._where(pending[0], layer)
            byh = self.job.by_host(pending)
            host = next(iter(byh)) if len(byh) == 1 else None
            return [Finding(f"every rank stopped {where} for {waited:.0f} s, none behind the others: "
                            f"{hosts_phrase(byh)}", host=host, ranks=sorted(pending))]
        behind = [r for r in pending if seqs[r] == low]
        ahead = [r for r in pending if seqs[r] > low]
        target = self._where(ahead[0], layer)
        out = []
        self.stalled[layer.number] = behind
        for host, ranks in self.job.by_host(behind).items():
            last = self._where(ranks[0], layer)
            still = time.monotonic() - max(self.progress[r].at for r in ranks)
            out.append(Finding(f"{host}: {ranks_phrase(ranks)} stopped {last} for {still:.0f} s, while "
                               f"{len(ahead)} other rank(s) went on and wait {target}", host=host, ranks=ranks))
        if finished:
            out.append(Finding(f"{len(finished)} rank(s) finished layer {layer.number}", note=True))
        return out

    def _where(self, rank: int, layer: Layer) -> str:
        p = self.progress[rank]
        if p.layer != layer.number or p.step.startswith("layer "):
            return f"at the start of layer {layer.number} ({layer.name})"
        return p.step if p.step.startswith(("inside", "at ")) else f"at: {p.step}"

    def _next(self, layer: Layer, findings: list[Finding]) -> str:
        """The layer's next step; where ranks were named as holding it up, first where they are (their pids)."""
        held = self.stalled.get(layer.number)
        if not held or any(not f.note and not set(f.ranks) <= set(held) for f in findings):
            return layer.next
        shown = [f"pid {self.job.ranks[r].pid} on {self.job.host_of(r)}" for r in sorted(held)[:3]]
        more = f" and {len(held) - 3} more" if len(held) > 3 else ""
        return (f"where the rank(s) named are stuck ({', '.join(shown)}{more}): py-spy dump --pid PID or gdb -p PID "
                f"there, that node's load and file systems; then {layer.next}")

    def _interrupted(self, result: LayerResult) -> LayerResult:
        if not self.interrupted:
            return result
        note = Finding(f"interrupted by {self.interrupted} during layer {result.layer.number}")
        return _failed(result, [note])

    # -- the end --------------------------------------------------------------------------------
    def _record_result(self, result: LayerResult) -> None:
        self.results.append(result)
        if not self.s.json:
            from microbench.doctor.text import layer_lines

            for line in layer_lines(result):
                self._say(line)

    def _finish(self) -> int:
        from microbench.doctor import record, text

        failed = next((r for r in self.results if r.status == "fail"), None)
        status = 0 if failed is None else 1
        if self.interrupted:
            status = 128 + getattr(signal.Signals, self.interrupted, signal.SIGINT).value
        wall = time.monotonic() - self.t0
        rec = record.build(self, failed, wall)
        if self.s.json:
            import json

            self._say(json.dumps(rec, indent=2))
        else:
            self._say(text.final_line(failed, wall, sum(r.status == "skipped" for r in self.results),
                                      self.interrupted))
        if self.s.out:
            try:
                record.write(self.s.out, rec)
            except UsageError as exc:
                print(f"microbench: error: {exc}", file=sys.stderr, flush=True)
                status = EXIT_USAGE
        if self.on_verdict is not None:
            self.on_verdict()
        self._stop_ranks(status)
        if self.end_launcher is not None:
            self.end_launcher()
        return status

    def _stop_ranks(self, status: int) -> None:
        stop = encode({"k": "stop", "status": status})
        for info in self.job.ranks.values():
            self.server.send(info.conn, stop)
        self.server.flush(3.0)

    def _say(self, line: str) -> None:
        print(line, flush=True)


def _failures(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if not f.note]


def _failed(result: LayerResult, extra: list[Finding]) -> LayerResult:
    findings = result.findings + extra
    first = next((f for f in findings if not f.note), None)
    summary = first.what if first else result.summary
    return LayerResult(result.layer, "fail" if first else result.status, summary, findings, result.seconds,
                       result.next or result.layer.next, result.details)


def serve_in_child(args, listening, token: str) -> int:
    """The coordinator forked by rank 0 (launched without a parent): serve, judge, print, record."""
    server = Server(sock=listening)
    coordinator = Coordinator(server, token, settings_of(args))
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda n, f: coordinator.post("signal", signal.Signals(n).name))
    try:
        return coordinator.run()
    finally:
        sys.stdout.flush()
        server.close()
