"""The Ray backend: a step's tool calls run on a cluster (tasks or actors); the run's loop stays here.

Only where the call runs changes. Each call still goes through the run's one tool-call path
(:func:`~planexec.executor.call_tool`): arguments checked here, the tool's timeout and
:class:`~planexec.tools.RetryPolicy` applied here, its output checked here, every attempt in the
run's log with the step's idempotency key. What the backend adds:

- the call becomes a Ray task asking for the resources of its executor, or of its tool
  (:class:`RayOptions`), so it lands on a node that has them;
- an error the tool raised on the cluster is raised here as itself (a ``TransientToolError``
  stays transient, a ``ToolError`` a tool error);
- a call the run gives up on (a timeout, a cancelled or obsolete step) cancels its task
  (``ray.cancel``: a task not started yet never starts, a running one is interrupted); a task
  still running ``kill_after`` seconds later has its worker process killed;
- Ray never retries a task by itself (``max_retries=0``): when the node or worker running a call
  dies, planexec decides. A call that changes nothing, or whose tool is idempotent, is sent again
  with the same idempotency key (Ray places it on a node that is still there); any other
  side-effecting call raises :class:`~planexec.errors.EffectUncertain`, and the run holds the step
  for a human.

With ``RayOptions(actors=N)`` the calls run on a pool of long-lived async actors instead (see
:mod:`planexec.executor._ray_pool`): same semantics, warm state, a fraction of the cost per call.

A model-driven step works the same way: wrap its :class:`ModelExecutor` (``inner=``); its model
turns are made by the run, its tool calls on the cluster.
"""

from __future__ import annotations

import asyncio
import math
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from planexec.errors import EffectUncertain, Problem, ToolError, UsageError
from planexec.executor._base import Executor, StepContext
from planexec.executor._outcome import StepError
from planexec.executor._profile import check_profile
from planexec.executor._ray_pool import ActorPool, PoolActor
from planexec.executor._tools import ToolExecutor
from planexec.models import Model, ModelRequest, ModelResponse, ToolCall
from planexec.plan import Step
from planexec.tools import Invoke, Tool, ToolContext, Toolset

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["RayExecutor", "RayOptions"]

INSTALL = "pip install 'planexec[ray]'"


def _ray() -> ModuleType:
    try:
        import ray
    except ImportError as e:
        raise UsageError(
            f"RayExecutor needs Ray: {INSTALL}",
            [Problem(code="executor", where="ray", message=f"Ray is not installed ({INSTALL})")],
        ) from e
    return ray


MOST_ACTORS = 10_000
"""The most actors a pool may have, and the most calls one actor may run at once."""


def _amount(value: object) -> bool:
    """A finite number >= 0 (not a bool): a count of CPUs, GPUs or a custom resource."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value >= 0


@dataclass(frozen=True, kw_only=True, slots=True)
class RayOptions:
    """What a call's Ray task (or actor) asks of the node it runs on, and the environment it runs in.

    ``num_cpus``, ``num_gpus``: as Ray counts them (None: Ray's default, one CPU, no GPU);
    ``resources``: custom resources, such as ``{"sql": 1}`` for a node started with
    ``--resources='{"sql": 4}'``; ``runtime_env``: Ray's runtime environment for the task (pip
    packages, environment variables, working directory).

    ``actors``: run the calls on a pool of up to that many long-lived Ray actors, each asking for
    the resources above for its whole life, instead of one task per call (None: as the options
    these are laid over say, else tasks; 0: tasks). ``actor_concurrency``: how many calls one actor
    runs at once on its event loop (None: as inherited, else 1).
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    runtime_env: Mapping[str, Any] | None = None
    actors: int | None = None
    actor_concurrency: int | None = None

    def problems(self, where: str) -> list[Problem]:
        found = []

        def add(at: str, message: str) -> None:
            found.append(Problem(code="executor", where=f"{where}{at}", message=message))

        for name, value in (("num_cpus", self.num_cpus), ("num_gpus", self.num_gpus)):
            if value is not None and not _amount(value):
                add(f".{name}", "must be a finite number >= 0")
        if not isinstance(self.resources, Mapping):
            add(".resources", f"must be a mapping of names to amounts, not {type(self.resources).__name__}")
        else:
            for name, value in self.resources.items():
                if not isinstance(name, str) or not name:
                    add(".resources", "names must be text")
                elif not _amount(value):
                    add(f".resources.{name}", "must be a finite number >= 0")
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            add(".runtime_env", "must be a mapping, or None")
        for name, value, least in (("actors", self.actors, 0), ("actor_concurrency", self.actor_concurrency, 1)):
            if value is not None and (type(value) is not int or not least <= value <= MOST_ACTORS):
                add(f".{name}", f"must be a whole number from {least} to {MOST_ACTORS:,}, or None")
        return found

    def over(self, base: RayOptions) -> RayOptions:
        """These options, with what they leave unset taken from ``base`` (resources merged)."""
        return RayOptions(
            num_cpus=base.num_cpus if self.num_cpus is None else self.num_cpus,
            num_gpus=base.num_gpus if self.num_gpus is None else self.num_gpus,
            resources={**base.resources, **self.resources},
            runtime_env=base.runtime_env if self.runtime_env is None else self.runtime_env,
            actors=base.actors if self.actors is None else self.actors,
            actor_concurrency=base.actor_concurrency if self.actor_concurrency is None else self.actor_concurrency,
        )

    def task_options(self) -> dict[str, Any]:
        """The options of ``ray.remote(...).options(...)``: never retried by Ray itself."""
        return {"max_retries": 0, "retry_exceptions": False, **self._placement()}

    def actor_options(self) -> dict[str, Any]:
        """The options of a pool actor's ``.options(...)``: async, running ``actor_concurrency`` calls
        at once, never restarted nor retried by Ray itself."""
        return {
            "max_concurrency": self.actor_concurrency or 1,
            "max_restarts": 0,
            "max_task_retries": 0,
            **self._placement(),
        }

    def _placement(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.num_cpus is not None:
            options["num_cpus"] = self.num_cpus
        if self.num_gpus is not None:
            options["num_gpus"] = self.num_gpus
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            options["runtime_env"] = dict(self.runtime_env)
        return options


def _run_on_node(invoke: Invoke, args: dict[str, Any], run_id: str, step_id: str, attempt: int, key: str) -> Any:
    """The body of every task: one attempt at a tool call, on whatever node Ray chose."""
    ctx = ToolContext(run_id=run_id, step_id=step_id, attempt=attempt, idempotency_key=key)

    async def call() -> Any:
        # ray.cancel interrupts the worker's main thread (as Ctrl-C would) without a signal: a loop
        # parked in a long poll notices only through the signal wakeup fd, which asyncio sets only
        # for a loop with a signal handler (Ray's uvloop sets its own). A handler of ours makes the
        # cancellation reach the call whatever the loop.
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        handled = False
        if main is not None:
            try:
                loop.add_signal_handler(signal.SIGINT, main.cancel)
                handled = True
            except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no signals here
                pass
        try:
            return await invoke(args, ctx)
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)

    return asyncio.run(call())


_connect_lock = threading.Lock()
_remote: Any = None
_actor_class: Any = None


def _connect(ray: ModuleType, address: str | None, init_options: Mapping[str, Any]) -> Any:
    """Connect this process to Ray once (or start a local cluster when ``address`` is None and
    none is configured); the remote function every call is made with."""
    global _remote, _actor_class
    with _connect_lock:
        if not ray.is_initialized():
            ray.init(address=address, **{"include_dashboard": False, "log_to_driver": False, **init_options})
        if _remote is None:
            _remote = ray.remote(max_retries=0)(_run_on_node)
            _actor_class = ray.remote(max_restarts=0, max_task_retries=0)(PoolActor)
        return _remote


def _other_cluster(ray: ModuleType, address: str | None) -> str | None:
    """Why ``address`` is not the cluster this process is connected to (None when it is, or when
    that cannot be told: no address, ``auto``, a ``ray://`` client address)."""
    if address is None or address == "auto" or address.startswith("ray://"):
        return None
    try:
        joined = str(ray.get_runtime_context().gcs_address)
    except Exception:  # connected through a client, or the context does not say
        return None
    if _same_place(joined, address):
        return None
    return f"this process is connected to the Ray cluster at {joined}, not {address}: a process joins one cluster"


def _same_place(one: str, other: str) -> bool:
    """Whether two ``host:port`` addresses name one place (hosts compared by their IP address
    when both resolve; an address that cannot be read is taken to be the same)."""
    host_a, _, port_a = one.rpartition(":")
    host_b, _, port_b = other.rpartition(":")
    if not (port_a.isascii() and port_a.isdigit() and port_b.isascii() and port_b.isdigit()):
        return True
    if int(port_a) != int(port_b):
        return False
    if host_a == host_b:
        return True
    try:
        return socket.gethostbyname(host_a) == socket.gethostbyname(host_b)
    except (OSError, UnicodeError, ValueError, TypeError):  # a name that cannot be looked up
        return True


def _give_up(ray: ModuleType, ref: Any, kill_after: float | None) -> None:
    """Cancel a call's task; one still running ``kill_after`` seconds later loses its worker
    (watched from a thread of its own, so that neither the run nor its loop waits for it)."""
    ray.cancel(ref, recursive=True)
    if kill_after is None:
        return

    def kill_if_running() -> None:
        try:
            done, _ = ray.wait([ref], timeout=kill_after)
            if not done and ray.is_initialized():
                ray.cancel(ref, force=True, recursive=True)
        except BaseException:  # Ray shut down meanwhile: nothing left to kill
            pass

    threading.Thread(target=kill_if_running, name="planexec-ray-cancel", daemon=True).start()


def _lost_types(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """What Ray raises when the node or worker process running a task died."""
    x = ray.exceptions
    return (
        x.NodeDiedError,
        x.WorkerCrashedError,
        x.LocalRayletDiedError,
        x.ObjectLostError,
        x.RayActorError,
    )


@dataclass(frozen=True, kw_only=True)
class RayExecutor:
    """Runs its steps' tool calls on a Ray cluster (as tasks, or on actor pools); the run's loop
    stays in this process.

    ``address``: the cluster to join — ``"auto"``, ``"127.0.0.1:6379"``, ``"ray://host:10001"`` —
    or None to join the one ``RAY_ADDRESS`` names, else start a local one (for development). A
    process joins one cluster: the first executor to connect decides. ``init_options`` go to
    ``ray.init``. ``options``: what every call of this executor asks of its node; ``tool_options``:
    per tool name, what that tool's calls ask instead (unset fields come from ``options``); with
    ``actors`` set, the calls run on a pool of long-lived actors (tools whose options end up equal
    share one pool; ``await close()`` kills them). ``inner``: the executor that carries the step
    out (a :class:`ToolExecutor` by default, or a :class:`ModelExecutor` for model-driven steps).
    ``resends``: how many times a call lost with its node (or actor) is sent again when that is
    safe. ``kill_after``: seconds a cancelled call is given to end before the worker process running
    it is killed (a task: ``ray.cancel(force=True)``; an actor's call: the actor is killed and
    replaced, losing its other calls; None: never). Tools must be picklable, and planexec and their
    modules importable on the cluster's nodes (install them there, or use ``runtime_env``).
    """

    name: str = "tools"
    address: str | None = None
    options: RayOptions = field(default_factory=RayOptions)
    tool_options: Mapping[str, RayOptions] = field(default_factory=dict)
    inner: Executor | None = None
    max_concurrency: int | None = None
    description: str = ""
    capabilities: Sequence[str] = ()
    resends: int = 2
    kill_after: float | None = 5.0
    init_options: Mapping[str, Any] = field(default_factory=dict)
    _inner: Executor = field(init=False, repr=False, compare=False)
    _remote_tools: dict[int, tuple[Tool, Tool]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _pools: list[tuple[RayOptions, ActorPool]] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems: list[Problem] = []

        def add(where: str, message: str) -> None:
            problems.append(Problem(code="executor", where=where, message=message))

        if not isinstance(self.name, str) or not self.name.strip():
            add("name", "must be non-empty text")
        if self.address is not None and not isinstance(self.address, str):
            add(
                "address",
                f"must be text, such as 'auto' or '127.0.0.1:6379', or None, not {type(self.address).__name__}",
            )
        if not isinstance(self.init_options, Mapping):
            add("init_options", f"must be a mapping of ray.init's options, not {type(self.init_options).__name__}")
        if isinstance(self.options, RayOptions):
            problems += self.options.problems("options")
        else:
            add("options", f"must be a RayOptions, not {type(self.options).__name__}")
        if not isinstance(self.tool_options, Mapping):
            add(
                "tool_options", f"must be a mapping of tool names to RayOptions, not {type(self.tool_options).__name__}"
            )
        else:
            for tool_name, opts in self.tool_options.items():
                if not isinstance(opts, RayOptions):
                    add(f"tool_options.{tool_name}", f"must be a RayOptions, not {type(opts).__name__}")
                else:
                    problems += opts.problems(f"tool_options.{tool_name}")
        most = self.max_concurrency
        if most is not None and (type(most) is not int or most < 1):
            problems.append(Problem(code="executor", where="max_concurrency", message="must be a whole number >= 1"))
        if type(self.resends) is not int or self.resends < 0:
            problems.append(Problem(code="executor", where="resends", message="must be a whole number >= 0"))
        wait = self.kill_after
        if wait is not None and (
            isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < float("inf")
        ):
            problems.append(Problem(code="executor", where="kill_after", message="must be seconds >= 0, or None"))
        if self.inner is not None and not isinstance(self.inner, Executor):
            problems.append(Problem(code="executor", where="inner", message="must be an executor"))
        description = self.description or getattr(self.inner, "description", "")
        capabilities = self.capabilities or getattr(self.inner, "capabilities", ())
        description, capabilities, bad = check_profile(description, capabilities)
        problems += bad
        if problems:
            raise UsageError(f"invalid Ray executor {self.name!r}", problems)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "capabilities", capabilities)
        object.__setattr__(self, "_inner", self.inner if self.inner is not None else ToolExecutor(name=self.name))

    @property
    def kind(self) -> Literal["tools", "model"]:
        return self._inner.kind

    async def run(self, step: Step, args: dict[str, Any], ctx: StepContext) -> Any:
        return await self._inner.run(step, args, _OnRay(ctx, self))

    async def connect(self) -> None:
        """Join the cluster now rather than at the first call (``ray.init`` runs in a thread);
        raises :class:`~planexec.UsageError` when this process is connected to another cluster."""
        ray = _ray()
        await asyncio.to_thread(_connect, ray, self.address, self.init_options)
        elsewhere = _other_cluster(ray, self.address)
        if elsewhere is not None:
            raise UsageError(elsewhere, [Problem(code="executor", where=f"{self.name}.address", message=elsewhere)])

    def remote(self, tool: Tool) -> Tool:
        """``tool`` as this executor calls it: the same value, whose invoke runs on the cluster."""
        cached = self._remote_tools.get(id(tool))
        if cached is not None and cached[0] is tool:
            return cached[1]
        merged = self.tool_options.get(tool.name, RayOptions()).over(self.options)
        way = _Way(tool=tool, local=tool.invoke, options=merged)

        async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
            return await self._call(way, args, ctx)

        made = replace(tool, invoke=invoke)
        self._remote_tools[id(tool)] = (tool, made)
        return made

    async def close(self) -> None:
        """Kill this executor's actors (``RayOptions(actors=...)``); calls still running on them are
        lost. The executor stays usable: a later call makes new ones. Tasks are not affected."""
        pools, self._pools[:] = list(self._pools), []
        if not pools:
            return
        ray = _ray()
        for _, pool in pools:
            pool.close(ray)

    def _pool(self, options: RayOptions) -> ActorPool:
        """The pool of actors made with ``options`` (tools asking for the same share one)."""
        for made_with, pool in self._pools:
            if made_with == options:
                return pool
        pool = ActorPool(_actor_class, options.actor_options(), options.actors or 1)
        self._pools.append((options, pool))
        return pool

    async def _call(self, way: _Way, args: dict[str, Any], ctx: ToolContext) -> Any:
        ray = _ray()
        if _remote is None or not ray.is_initialized():
            await asyncio.to_thread(_connect, ray, self.address, self.init_options)
        elsewhere = _other_cluster(ray, self.address)
        if elsewhere is not None:
            raise ToolError(f"{way.tool.name}: {elsewhere}")
        if way.shipped is None:
            way.shipped = ray.put(way.local)  # the invoke, put in the object store once
        tool = way.tool
        call_args = (args, ctx.run_id, ctx.step_id, ctx.attempt, ctx.idempotency_key)
        lost_types = _lost_types(ray)
        resent = 0
        while True:
            pool = self._pool(way.options) if way.options.actors else None
            try:
                if pool is None:
                    return await self._on_task(ray, way, call_args)
                return await self._on_actor(ray, pool, way, call_args)
            except lost_types as e:
                lost: BaseException = e
            except ray.exceptions.RayTaskError as e:
                cause = e.cause
                if isinstance(cause, lost_types):
                    lost = cause
                elif isinstance(cause, Exception):
                    raise cause from None
                else:
                    raise ToolError(f"{tool.name} failed on the cluster: {e}") from None
            except ray.exceptions.TaskCancelledError:
                raise ToolError(f"{tool.name}: its task was cancelled on the cluster") from None
            where = "actor" if pool is not None else "node or worker"
            detail = f"the Ray {where} running it was lost ({type(lost).__name__})"
            if tool.side_effect and not tool.idempotent:
                raise EffectUncertain(tool.name, detail)
            if pool is not None and pool.closed:
                raise ToolError(f"{tool.name}: its actor was killed when the executor was closed") from None
            if resent >= self.resends:
                raise ToolError(f"{tool.name}: {detail}, {resent + 1} times") from None
            resent += 1  # safe to send again: the same arguments, the same idempotency key
            ctx.report(resent, self.resends, f"sent again with the same idempotency key: {detail}")

    async def _on_task(self, ray: ModuleType, way: _Way, call_args: tuple[Any, ...]) -> Any:
        ref = _remote.options(**way.options.task_options()).remote(way.shipped, *call_args)
        try:
            return await ref
        except asyncio.CancelledError:
            _give_up(ray, ref, self.kill_after)
            raise

    async def _on_actor(self, ray: ModuleType, pool: ActorPool, way: _Way, call_args: tuple[Any, ...]) -> Any:
        tool = way.tool
        member = pool.pick()
        if tool.side_effect and not tool.idempotent:
            member = await self._live(ray, pool, member, tool.name)
        tool_key = way.key
        ref = pool.submit(member, tool_key, way.shipped, call_args)
        ran = False
        try:
            result = await ref
            ran = True
            return result
        except asyncio.CancelledError:
            pool.give_up(ray, member, ref, self.kill_after)
            raise
        except ray.exceptions.RayTaskError:
            ran = True  # the tool raised: the actor ran the call, and holds the tool
            raise
        except ray.exceptions.RayActorError as e:
            pool.drop(member, ray)  # dead or unreachable: a new actor takes its place when needed
            if getattr(e, "actor_init_failed", False):  # never started, so the call never ran
                raise ToolError(f"{tool.name}: its Ray actor could not be started: {e}") from None
            raise
        finally:
            pool.done(member, tool_key, ran=ran)

    async def _live(self, ray: ModuleType, pool: ActorPool, member: Any, tool_name: str) -> Any:
        """``member``, or another actor of the pool, once it has answered: a call that is not safe
        to repeat is never sent to an actor that died while idle (its loss would leave the effect
        uncertain when the call was certainly never run)."""
        for _ in range(self.resends + 1):
            try:
                await member.handle.ready.remote()
                return member
            except ray.exceptions.RayActorError as e:
                pool.done(member)
                pool.drop(member, ray)
                if getattr(e, "actor_init_failed", False):
                    raise ToolError(f"{tool_name}: its Ray actor could not be started: {e}") from None
            except BaseException:
                pool.done(member)
                raise
            member = pool.pick()
        pool.done(member)
        raise ToolError(f"{tool_name}: no Ray actor of its pool answered ({self.resends + 1} tried)")


@dataclass(eq=False, kw_only=True)
class _Way:
    """How one tool is called on the cluster: its options, and its invoke once put in the store."""

    tool: Tool
    local: Invoke
    options: RayOptions
    shipped: Any = None

    @property
    def key(self) -> str:
        """What names the tool on the actors it is sent to (unique in this process)."""
        return f"{self.tool.name}#{id(self)}"


class _OnRay:
    """The step's context, with each tool call sent to the cluster."""

    __slots__ = ("_ctx", "_executor")

    def __init__(self, ctx: StepContext, executor: RayExecutor) -> None:
        self._ctx = ctx
        self._executor = executor

    @property
    def run_id(self) -> str:
        return self._ctx.run_id

    @property
    def step(self) -> Step:
        return self._ctx.step

    @property
    def tools(self) -> Toolset:
        return self._ctx.tools

    @property
    def cancel_grace(self) -> float:
        return self._ctx.cancel_grace

    @property
    def confidence(self) -> float | None:
        return self._ctx.confidence

    async def call_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str | None = None) -> Any:
        return await self._ctx.call_tool(self._executor.remote(tool), args, call_id=call_id)

    def refuse_tool_call(self, call: ToolCall, error: StepError) -> None:
        self._ctx.refuse_tool_call(call, error)

    async def call_model(self, model: Model, request: ModelRequest) -> ModelResponse:
        return await self._ctx.call_model(model, request)

    def report_confidence(self, confidence: float) -> None:
        self._ctx.report_confidence(confidence)
