"""``make chaos``: a mixed workload on a real cluster while a nemesis injects
faults, then recovery, a read-back through a fresh client, and the
independent checker's verdict.

    python -m tests.chaos.run [--minutes 20] [--seed N] [--short] [--dir DIR]

The seed is printed first; the same seed gives the same fault schedule
and workload (process timing still varies, as it does on a real cluster).
Everything the run leaves is in ``--dir`` (default: a new temporary
directory, kept when the run fails): ``history/`` (one JSON-lines file per
actor, merged into ``history.jsonl``), ``final.json``, ``report.json``,
``logs/`` and the cluster's own directories.

Phases: start the cluster (5 bookies, one on a small tmpfs, 2 write proxies,
AutoRecovery) and the workload; inject faults for the run's length; heal
everything and check every stream still takes writes; stop the workload
(Spark is let catch up first); in the long mode, fuzz a bookie with a
million frames; wait for full replication, verified by digest on every
bookie; read back the final state; check; print the report.

Exit status: 0 when the checker finds no violation and the cluster
recovered; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.chaos import checker
from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import FAULTS, Fault, NemesisContext
from tests.chaos.history import Recorder, dlsn_value, read_history
from tests.chaos.supervisor import Supervisor
from tests.chaos.workload import EXIT_BROKEN, rid_of

#: Settings of every client (writers, readers, consumers, proxies, Spark):
#: small segments so that segments roll and retention has work, and a short
#: ZooKeeper session so that a pause expires it.
DLOG_SETTINGS: dict[str, Any] = {
    "bkcEnsembleSize": 3,
    "bkcWriteQuorumSize": 3,
    "bkcAckQuorumSize": 2,
    "maxLogSegmentBytes": 256 * 1024,
    "zkSessionTimeoutSeconds": 4,
    "subscriptionSegmentMaxEntries": 400,
}

BOOKIE_SETTINGS: dict[str, Any] = {
    "zkTimeout": 4000,
    "diskCheckInterval": 1000,
    "diskUsageThreshold": 0.95,
    "diskUsageLwmThreshold": 0.90,
    "auditorPeriodicCheckInterval": 20,
    "auditorPeriodicBookieCheckInterval": 10,
    "auditorLedgerVerificationPercentage": 100,
    # BookKeeper's 300 s: one attempt failed against a bookie the nemesis had
    # just killed held its ledger's recovery back five minutes (a full-suite
    # short run waited that long for one ledger).
    "lockReleaseOfFailedLedgerGracePeriod": 10000,
    "gcWaitTime": 10000,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__)
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--minutes", type=float, default=None, help="fault phase (default 15, short 1)")
    p.add_argument("--short", action="store_true", help="the ~2 minute mode `make test` runs")
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--bookies", type=int, default=5)
    p.add_argument("--proxies", type=int, default=2)
    p.add_argument("--fault-interval", type=float, default=None, help="mean seconds between faults")
    p.add_argument("--rate", type=float, default=None, help="records/s per writer")
    p.add_argument("--fuzz-frames", type=int, default=None, help="frames sent to a bookie")
    p.add_argument("--disk-mb", type=int, default=None, help="size of the small ledger disk")
    p.add_argument("--no-spark", dest="spark", action="store_false")
    p.add_argument(
        "--recovery-timeout",
        type=float,
        default=None,
        help="to reach full replication (default 900 s, short 240 s)",
    )
    p.add_argument(
        "--spark-timeout",
        type=float,
        default=None,
        help="to catch up at the end (default 600 s, short 150 s)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds after which a stuck run dumps its tasks' stacks and stops"
        " (default: none, short 660)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="dlog setting")
    p.add_argument(
        "--bookie-set", action="append", default=[], metavar="KEY=VALUE", help="bookie setting"
    )
    p.add_argument("--faults", default="", help="comma-separated fault names (default: all)")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 32)
    if args.minutes is None:
        args.minutes = 1.0 if args.short else 15.0
    if args.fault_interval is None:
        args.fault_interval = 3.5 if args.short else 10.0
    if args.rate is None:
        args.rate = 100.0 if args.short else 200.0
    if args.fuzz_frames is None:
        args.fuzz_frames = 20_000 if args.short else 1_000_000
    if args.disk_mb is None:
        args.disk_mb = 96 if args.short else 512
    # The short mode's phases are bounded so that a run stuck in one of them
    # still ends with its report (which check failed) inside the test's time.
    if args.recovery_timeout is None:
        args.recovery_timeout = 240.0 if args.short else 900.0
    if args.spark_timeout is None:
        args.spark_timeout = 150.0 if args.short else 600.0
    if args.deadline is None and args.short:
        args.deadline = 660.0
    return args


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"{what} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


class Run:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.dir = directory
        self.rng = random.Random(args.seed)
        self.history_dir = directory / "history"
        self.dlog_settings = {**DLOG_SETTINGS, **_pairs(args.set, "--set")}
        self.bookie_settings = {**BOOKIE_SETTINGS, **_pairs(args.bookie_set, "--bookie-set")}
        self.cluster = ChaosCluster(
            directory / "cluster",
            bookies=args.bookies,
            proxies=args.proxies,
            bookie_settings=self.bookie_settings,
            dlog_settings=self.dlog_settings,
            disk_mb=args.disk_mb,
        )
        self.nemesis = Recorder(self.history_dir, "nemesis")
        self.faults: Counter[str] = Counter()
        self.fault_errors: list[str] = []
        self.checks: dict[str, Any] = {}
        self.spark: subprocess.Popen[bytes] | None = None
        self.phases: dict[str, float] = {}
        self.current_phase = "start"
        self.stuck: str | None = None

    # -- workload ------------------------------------------------------------------
    def client_settings(self) -> list[str]:
        out = []
        for k, v in self.dlog_settings.items():
            out += ["--set", f"{k}={_conf_value(v)}"]
        return out

    def start_workload(self) -> Supervisor:
        uri = self.cluster.sandbox.namespace_uri
        sup = Supervisor(self.dir, self.history_dir, uri, self.args.seed)
        common = self.client_settings()
        rate = str(self.args.rate)
        for s in ("s0", "s1", "sret"):
            sup.add(f"writer-{s}", "writer", ["--stream", s, "--rate", rate, *common])
        proxies = ",".join(self.cluster.sandbox.proxy_endpoints)
        if proxies:
            sup.add(
                "proxy-writer-sp",
                "proxy-writer",
                ["--stream", "sp", "--rate", rate, "--proxies", proxies],
            )
        for s in ("s0", "s1", "sp", "sret"):
            sup.add(f"reader-{s}", "reader", ["--stream", s, *common])
        consumers = [
            ("s0", "czk", "zk"),
            ("s0", "cls", "log-segment"),
            ("s1", "cls", "log-segment"),
        ]
        if proxies:
            consumers.append(("sp", "czk", "zk"))
        for s, sub, store in consumers:
            sup.add(
                f"consumer-{s}-{sub}",
                "consumer",
                [
                    "--stream",
                    s,
                    "--subscriber",
                    sub,
                    "--store",
                    store,
                    "--commit-every",
                    "20",
                    *common,
                ],
            )
        sup.add(
            "migrator-s1",
            "migrator",
            ["--stream", "s1", "--subscriber", "migrating", "--commit-every", "10", *common],
        )
        sup.add("retention-sret", "retention", ["--stream", "sret", "--interval", "8", *common])
        self.subscribers = [(s, sub) for s, sub, _ in consumers] + [("s1", "migrating")]
        self.streams = ["s0", "s1", "sret"] + (["sp"] if proxies else [])
        return sup

    def start_spark(self) -> None:
        out = self.dir / "spark"
        args = [
            sys.executable,
            "-m",
            "tests.chaos.workload",
            "spark",
            "--uri",
            self.cluster.sandbox.namespace_uri,
            "--history",
            str(self.history_dir),
            "--proc",
            "spark",
            "--stream",
            "s0",
            "--subscriber",
            "spark",
            "--output",
            str(out / "output"),
            "--checkpoint",
            str(out / "checkpoint"),
            *self.client_settings(),
        ]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.dir / "logs" / "spark.log", "ab") as log:
            self.spark = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    # -- nemesis -------------------------------------------------------------------
    async def nemesis_loop(self, ctx: NemesisContext, until: float) -> None:
        enabled = [
            f() for f in FAULTS if not self.args.faults or f.name in self.args.faults.split(",")
        ]
        first = list(enabled)
        self.rng.shuffle(first)  # every kind once, then at random
        heals: set[asyncio.Task[None]] = set()

        def going() -> bool:
            # Every kind at least once, even if that takes up to a minute more.
            now = time.monotonic()
            return now < until or (bool(first) and now < until + 60)

        while going():
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.args.fault_interval)
            if not going():
                break
            fault = (
                first.pop(0) if first else self.rng.choices(enabled, [f.weight for f in enabled])[0]
            )
            targets = fault.targets(ctx)
            if not targets:
                if not self.faults[fault.name] and fault not in first:
                    first.append(fault)  # not possible now: again later
                continue
            target = self.rng.choice(sorted(targets))
            op = self.nemesis.invoke("fault", kind=fault.name, target=target)
            try:
                heal_in, what = await fault.inject(ctx, target)
            except Exception as e:
                self.nemesis.info(op, "fault", e)
                self.fault_errors.append(f"{fault.name} {target}: {type(e).__name__}: {e}")
                continue
            self.nemesis.ok(op, "fault", **what)
            self.faults[fault.name] += 1
            print(f"  fault {fault.name} -> {target} {what if what else ''}", flush=True)
            if heal_in > 0:
                t = asyncio.ensure_future(self._heal_later(ctx, fault, target, heal_in))
                heals.add(t)
                t.add_done_callback(heals.discard)
        if heals:
            await asyncio.gather(*heals)

    async def _heal_later(
        self, ctx: NemesisContext, fault: Fault, target: str, delay: float
    ) -> None:
        await asyncio.sleep(delay)
        op = self.nemesis.invoke("heal", kind=fault.name, target=target)
        try:
            await fault.heal(ctx, target)
        except Exception as e:
            self.nemesis.info(op, "heal", e)
            self.fault_errors.append(f"heal {fault.name} {target}: {type(e).__name__}: {e}")
            return
        self.nemesis.ok(op, "heal")

    async def supervise(self, sup: Supervisor, stop: asyncio.Event) -> None:
        while not stop.is_set():
            sup.poll()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    # -- the run -------------------------------------------------------------------
    async def run(self) -> int:
        a = self.args
        print(
            f"chaos: seed {a.seed}, {a.minutes:g} min of faults, directory {self.dir}", flush=True
        )
        await asyncio.to_thread(self.cluster.start)
        sup = self.start_workload()
        if a.spark:
            self.start_spark()
        stop_supervising = asyncio.Event()
        supervising = asyncio.ensure_future(self.supervise(sup, stop_supervising))
        # Long enough to expire the longest ZooKeeper session, client's or bookie's.
        session = max(
            float(self.dlog_settings["zkSessionTimeoutSeconds"]),
            float(self.bookie_settings["zkTimeout"]) / 1000,
        )
        ctx = NemesisContext(self.cluster, sup, self.rng, pause_seconds=2 * session + 2)
        watchdog = None
        if a.deadline:
            main = asyncio.current_task()
            assert main is not None
            watchdog = asyncio.ensure_future(self.watchdog(main, a.deadline))
        try:
            await asyncio.sleep(5)
            async with self.phase("faults"):
                await self.nemesis_loop(ctx, time.monotonic() + a.minutes * 60)
            print("chaos: faults over; healing", flush=True)
            async with self.phase("healing"):
                await asyncio.to_thread(self.heal_everything)
                self.checks["progress after healing"] = await self.progress_after_healing()
            async with self.phase("stopping the workload"):
                stop_supervising.set()
                await supervising
                await asyncio.to_thread(sup.stop)
                self.checks["actors exited cleanly"] = _actor_exits(sup)
            if self.spark is not None:
                async with self.phase("spark catching up"):
                    self.checks["spark caught up"] = await self.stop_spark()
            if a.fuzz_frames:
                async with self.phase("frame fuzz"):
                    self.checks["frame fuzz"] = await asyncio.to_thread(self.fuzz)
            async with self.phase("recovery"):
                self.checks["full replication, verified by digest"] = await self.recover()
            async with self.phase("final read"):
                final = await self.final_state()
        finally:
            if watchdog is not None:
                watchdog.cancel()
            stop_supervising.set()
            with contextlib.suppress(Exception):
                sup.stop(10)
            if self.spark is not None and self.spark.poll() is None:
                self.spark.kill()
            self.nemesis.close()
            await asyncio.to_thread(self.cluster.stop)
        (self.dir / "final.json").write_text(json.dumps(final))
        return self.judge(final)

    @contextlib.asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """Time a phase of the run (the report lists them)."""
        started = time.monotonic()
        self.current_phase = name
        try:
            yield
        finally:
            self.phases[name] = round(time.monotonic() - started, 1)
            print(f"chaos: {name}: {self.phases[name]} s", flush=True)

    async def watchdog(self, main: asyncio.Task[int], deadline: float) -> None:
        """A run still going at its deadline is stuck: say in which phase,
        write every task's and thread's stack to ``stacks.txt`` (and print
        it), then cancel the run, whose cleanup still stops the cluster."""
        await asyncio.sleep(deadline)
        out = io.StringIO()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                print(f"--- {task!r}", file=out)
                task.print_stack(file=out)
        for ident, frame in sys._current_frames().items():
            print(f"--- thread {ident}", file=out)
            traceback.print_stack(frame, file=out)
        path = self.dir / "stacks.txt"
        await asyncio.to_thread(path.write_text, out.getvalue())
        print(
            f"chaos: STUCK in phase {self.current_phase!r} after {deadline:g} s;"
            f" stacks in {path}:\n{out.getvalue()[-8000:]}",
            flush=True,
        )
        self.stuck = self.current_phase
        main.cancel()

    def heal_everything(self) -> None:
        """Whatever a heal did not bring back (it failed, or came after the
        end), start it now."""
        sb = self.cluster.sandbox
        if not sb.zookeeper.alive():
            self.cluster.start_zookeeper()
        for i, b in enumerate(sb.bookies):
            if not b.alive():
                self.cluster.start_bookie(i)
        for i, p in enumerate(sb.proxies):
            if not p.alive():
                self.cluster.start_proxy(i)
        if self.cluster.auditor is None or self.cluster.auditor.poll() is not None:
            self.cluster.start_auditor()
        ballast = self.cluster.ledger_dir(self.cluster.small_disk_bookie) / "chaos-ballast"
        ballast.unlink(missing_ok=True)

    async def progress_after_healing(self) -> dict[str, Any]:
        """Every stream takes acknowledged writes again within 90 s: its last
        durable record moves past where it was when everything was healed."""
        from dlog.errors import DLogError
        from dlog.namespace import Namespace

        ns = await Namespace.open(
            self.cluster.sandbox.namespace_uri, _dlog_conf(self.dlog_settings, False)
        )
        try:
            logs = {s: await ns.open_log(s) for s in self.streams}
            start: dict[str, Any] = {}
            for s, log_ in logs.items():
                with contextlib.suppress(DLogError):
                    start[s] = await log_.get_last_dlsn()
            pending = set(self.streams)
            deadline = time.monotonic() + 90
            while pending and time.monotonic() < deadline:
                await asyncio.sleep(2)
                for s in sorted(pending):
                    with contextlib.suppress(DLogError):
                        last = await logs[s].get_last_dlsn()
                        if s not in start or last > start[s]:
                            pending.discard(s)
        finally:
            await ns.close()
        return {"ok": not pending, "streams without writes": sorted(pending)}

    async def stop_spark(self) -> dict[str, Any]:
        """With the writers stopped, wait until Spark's output holds the last
        record of its stream (its micro-batches show how far it got; the
        subscription's znode may lag a live log-segment owner), then stop it."""
        assert self.spark is not None
        from dlog.namespace import Namespace

        ns = await Namespace.open(
            self.cluster.sandbox.namespace_uri, _dlog_conf(self.dlog_settings, False)
        )
        try:
            last = dlsn_value(await (await ns.open_log("s0")).get_last_dlsn())
        finally:
            await ns.close()
        output = self.dir / "spark" / "output"
        seen: set[Path] = set()
        newest: list[int] | None = None
        started = time.monotonic()
        while time.monotonic() - started < self.args.spark_timeout and self.spark.poll() is None:
            for path in sorted(output.glob("batch-*.json")):
                if path not in seen:
                    seen.add(path)
                    for _, dlsn in json.loads(path.read_text()):
                        newest = dlsn if newest is None else max(newest, dlsn)
            if newest is not None and last is not None and newest >= last:
                break
            await asyncio.sleep(2)
        waited = round(time.monotonic() - started, 1)
        self.spark.terminate()
        try:
            await asyncio.to_thread(self.spark.wait, 60)
        except subprocess.TimeoutExpired:
            self.spark.kill()
        reached = newest is not None and last is not None and newest >= last
        return {"ok": reached, "last": last, "output reached": newest, "waited s": waited}

    def fuzz(self) -> dict[str, Any]:
        from tests.chaos.fuzz_frames import fuzz_bookie

        b = self.cluster.sandbox.bookies[0]
        stats = fuzz_bookie(
            b.host, b.port, frames=self.args.fuzz_frames, seed=self.args.seed, pid=b.pid
        )
        stats["ok"] = b.alive()
        return stats

    async def recover(self) -> dict[str, Any]:
        """Wait until nothing is under-replicated and every replica of every
        ledger reads back with a valid digest (AutoRecovery does the work)."""
        from dlog.ledger.checker import verify_ledgers
        from dlog.ledger.client import BookKeeper
        from dlog.ledger.underreplication import UnderreplicationManager

        deadline = time.monotonic() + self.args.recovery_timeout
        bad: list[Any] = []
        under: list[Any] = []
        rounds = 0
        exits: list[int] = []
        async with BookKeeper(self.cluster.sandbox.metadata_service_uri) as bk:
            urm = UnderreplicationManager(bk.zk, bk.uri.ledgers_root)
            while True:
                rounds += 1
                # Nothing recovers without AutoRecovery: one that exited (it
                # could not start, or crashed) is started again, as an
                # operator's supervisor would, and its exits are reported.
                auditor = self.cluster.auditor
                if auditor is not None and auditor.poll() is not None:
                    exits.append(auditor.returncode)
                    self.cluster.start_auditor()
                under = await urm.list()
                bad = [] if under else await verify_ledgers(bk, percentage=100)
                if not under and not bad:
                    break
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(5)
        return {
            "ok": not under and not bad and not exits,
            "rounds": rounds,
            "autorecovery exits": exits,
            "under-replicated": [u[0] for u in under][:20],
            "bad replicas": [str(b) for b in bad][:20],
            "re-replication": self.cluster.replication_counters(),
        }

    async def final_state(self) -> dict[str, Any]:
        """Every stream read from its first record, every subscription's
        position, Spark's output: through a fresh client."""
        from dlog.dlsn import NonInclusiveLowerBound
        from dlog.errors import LockingError, LogEmptyError
        from dlog.namespace import Namespace

        uri = self.cluster.sandbox.namespace_uri
        ns = {
            store: await Namespace.open(uri, _dlog_conf(self.dlog_settings, store == "log-segment"))
            for store in ("zk", "log-segment")
        }
        final: dict[str, Any] = {"streams": {}, "subscriptions": {}}
        try:
            for s in self.streams:
                log_ = await ns["zk"].open_log(s)
                # A writer that died (or was stopped while starting again)
                # leaves its segment in progress: records it had acknowledged
                # past the LAC become readable once a writer recovers it, as
                # the next one would. Owned streams (the proxies') are left to
                # their owner.
                with contextlib.suppress(LockingError):
                    await (await log_.open_writer(lock_timeout=5.0)).close()
                records: list[list[Any]] = []
                try:
                    last = await log_.get_last_dlsn()
                except LogEmptyError:
                    last = None
                if last is not None:
                    reader = await log_.open_reader(from_dlsn=await log_.get_first_dlsn())
                    while True:
                        batch = await reader.read_bulk(1000, timeout=5.0)
                        records += [[rid_of(r.payload), dlsn_value(r.dlsn)] for r in batch]
                        if not batch or batch[-1].dlsn >= last:
                            break
                    await reader.close()
                final["streams"][s] = records
            subs = list(self.subscribers) + ([("s0", "spark")] if self.args.spark else [])
            for s, sub in subs:
                info = await (await ns["zk"].open_log(s)).subscriptions.describe(sub)
                store = "log-segment" if info.format == "log-segment" else "zk"
                consumer = await (await ns[store].open_log(s)).subscribe(sub)
                position = await consumer.committed()
                await consumer.close()
                value = None if position == NonInclusiveLowerBound else dlsn_value(position)
                final["subscriptions"][f"{s}/{sub}"] = value
        finally:
            for n in ns.values():
                await n.close()
        if self.args.spark:
            output: list[Any] = []
            for path in sorted((self.dir / "spark" / "output").glob("batch-*.json")):
                output += json.loads(path.read_text())
            final["spark"] = {
                "stream": "s0",
                "subscriber": "spark",
                "position": final["subscriptions"].pop("s0/spark"),
                "output": output,
            }
        return final

    # -- verdict -------------------------------------------------------------------
    def judge(self, final: dict[str, Any]) -> int:
        lines = sorted(
            (ln for ln in read_history(self.history_dir)),
            key=lambda ln: json.loads(ln)["t"],
        )
        with open(self.dir / "history.jsonl", "w") as f:
            f.writelines(lines)
        report = checker.check(checker.load_history(self.dir / "history.jsonl"), final)
        from tests.chaos.report import print_report

        ok = print_report(self, report)
        return 0 if ok else 1


def _actor_exits(sup: Supervisor) -> dict[str, Any]:
    """Actors end by SIGTERM (0), by a fault they could not ride out
    (EXIT_BROKEN), or killed by the nemesis (-9); anything else is a crash."""
    crashes = {
        name: {code: n for code, n in slot.exits.items() if code not in (0, EXIT_BROKEN, -9)}
        for name, slot in sup.slots.items()
    }
    crashes = {k: v for k, v in crashes.items() if v}
    return {
        "ok": not crashes,
        "incarnations": sum(s.starts for s in sup.slots.values()),
        "crashes": crashes,
    }


def _stream_of(proc: str) -> str:
    # writer-s1-3 -> s1; proxy-writer-sp-2 -> sp
    return proc.rsplit("-", 2)[-2]


def _conf_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _dlog_conf(settings: dict[str, Any], log_segment_store: bool) -> Any:
    from dlog.conf.dlog import DLogConfig

    return DLogConfig.from_mapping(
        {**settings, "logSegmentBasedSubscriptionsStoreEnabled": log_segment_store}
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="dlog-chaos-"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    logging.basicConfig(
        filename=directory / "logs" / "runner.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    run = Run(args, directory.absolute())
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        code = asyncio.run(run.run())
    except asyncio.CancelledError:
        if run.stuck is None:
            raise
        print(f"chaos: FAILED: stuck in phase {run.stuck!r}", flush=True)
        code = 1
    print(f"chaos: seed {args.seed}; everything is in {directory}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
