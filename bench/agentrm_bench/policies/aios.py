"""`aios`: the AIOS kernel's FIFO scheduler (agiresearch/AIOS, main as stored in 2026), with the
LLM core it drives and the one thread that runs every tool call.

Sources (agiresearch/AIOS unless named; cited beside the code):
- `runtime/launch.py` `initialize_scheduler`: with `use_context_manager: false` (the default in
  `aios/config/config.yaml.example`) the kernel runs the FIFO scheduler.
- `aios/scheduler/fifo_scheduler.py` `FIFOScheduler.process_llm_requests`: a loop that sleeps
  `batch_interval` (1.0 s), then drains the LLM queue, then calls
  `llm.execute_llm_syscalls(batch)` and waits for it to return before it sleeps again: a
  batch runs to its end before the next is even collected. Draining uses
  `aios/hooks/stores/queue.py` `getMessage` = `q.get(block=True, timeout=0.1)` until Empty,
  so collection ends once the queue has stayed empty for 0.1 s (calls arriving meanwhile join
  the batch), and an empty drain costs 0.1 s before the next 1 s sleep.
- `aios/llm_core/adapter.py` `execute_llm_syscalls` -> `_process_batch_for_model`: one
  ThreadPoolExecutor per model with `max_workers=len(tasks)`, i.e. every call of the batch in
  its own thread, no cap; the group's results are returned together and only then is each
  syscall's event set, so an agent learns of its answer when the whole batch is done: one
  hung call stalls every call of its batch and every later LLM call of the fleet.
- each call is `litellm.completion(model=..., messages, temperature, max_tokens)`
  (`_get_model_response`): not streamed, no timeout, no retries passed. LiteLLM then
  applies `timeout = timeout or kwargs.get("request_timeout", 600) or 600` (BerriAI/litellm
  `litellm/main.py`, "set timeout for 10 minutes by default") and builds the openai client with
  `max_retries = data.pop("max_retries", 2)` (`litellm/llms/openai/openai.py`). The openai
  SDK (openai/openai-python `_base_client.py`) retries a timeout and a 429 up to those 2
  times, sleeping `_calculate_retry_timeout` (retry-after when 0 < it <= 120 s, else 0.5 s *
  2^n capped at 8 s minus up to 25% jitter: `base.sdk_backoff`). A non-streamed request sees
  no byte before its answer, so the 600 s read timeout runs from the send whether the
  provider hangs before its first token, stalls mid-generation or is slow.
- after the SDK gives up, `_handle_completion_error` turns the exception into an error
  LLMResponse (429 / 408) with `finished=True`, the syscall is "done" and the error goes back
  to the agent (`aios/syscall/syscall.py` `_execute_syscall` re-queues only unfinished calls).
- tools: `FIFOScheduler.process_tool_requests` is ONE thread that takes tool syscalls off the
  tool queue and runs `tool_manager.address_request` to its end, one at a time, for the
  whole kernel.

Model:
- LLM syscalls queue FIFO; the scheduler loop above collects a batch 1 s after the previous
  batch ended (0.1 s collection window, extended by arrivals), runs it, and delivers every
  answer of the batch when its last call is done (the agent's latency counts to delivery:
  `record.completed_at` is set then, not when the provider answered).
- in a batch each call runs in a worker thread (a slot held from its first attempt to its
  last, sleeps between SDK retries included); ASSUMPTION: AIOS itself has no cap, so the
  benchmark's pool bounds it at ctx.lanes threads, the rest of the batch waiting in FIFO
  order for a free worker (the executor's queue) inside the same batch.
- each attempt: cut 600 s after it was sent if unanswered; 429 and timeouts retried by the
  SDK twice; then the error reaches the agent, who asks again 1 s later (`agent_retry`); the
  call goes to the back of the LLM queue.
- tool time (`cur.call.tool_after_s`) is a tool syscall: agents queue FIFO for the one tool
  thread. The tool thread is not an LLM slot, so it is not recorded as a hold (it would count
  all of its time as lane waste against a cap it does not consume).

ASSUMPTIONS (the kinder reading each time):
- the backend is an OpenAI-compatible API through LiteLLM (`backend: openai`), as the
  benchmark's provider is; Ollama / HF local backends are not modelled.
- agents are outside the kernel's agent factory, so its ThreadPoolExecutor(max_workers=64)
  (`aios/hooks/modules/agent.py`, `agent_factory.max_workers: 64`) does not cap concurrent
  runs, and the HTTP `/query` handler (`runtime/launch.py`), which runs tool queries inline on
  the event loop, is not modelled: only the kernel's own scheduler serialises tools.
"""
from __future__ import annotations

from collections import deque
from typing import cast

from ..sim import Attempt, CallRecord, SlotHold
from .base import Context, Cursor, Policy, sdk_backoff

# aios/scheduler/fifo_scheduler.py FIFOScheduler.__init__(batch_interval=1.0)
BATCH_INTERVAL_S = 1.0
# aios/hooks/stores/queue.py getMessage: q.get(block=True, timeout=0.1)
QUEUE_GET_TIMEOUT_S = 0.1
# BerriAI/litellm litellm/main.py completion(): timeout ... or 600
SDK_TIMEOUT_S = 600.0
# BerriAI/litellm litellm/llms/openai/openai.py: data.pop("max_retries", 2) (openai-python DEFAULT_MAX_RETRIES)
SDK_MAX_RETRIES = 2
_EPS = 1e-9


class Aios(Policy):
    name = "aios"

    def __init__(self, ctx: Context, agents=None, variant=None):
        super().__init__(ctx, agents)
        self.workers = ctx.lanes
        self.queue: deque[Cursor] = deque()       # the kernel's LLM request queue
        self.collecting = False
        self.collect_until = 0.0
        self.batch: list[Cursor] = []
        self.waiting: deque[Cursor] = deque()      # batch members waiting for a worker
        self.running = 0
        self.outstanding = 0
        self.results: list[tuple[Cursor, bool]] = []
        self.tool_queue: deque[Cursor] = deque()
        self.tool_busy = False
        self.batches = 0
        self.largest_batch = 0
        self.sdk_timeouts = 0

    def start(self) -> None:
        super().start()
        self.sim.at(BATCH_INTERVAL_S, self._drain)  # the loop sleeps before its first drain

    # -- the scheduler's LLM loop ---------------------------------------------------------
    def call_ready(self, cur: Cursor) -> None:
        if self.collecting:
            # a blocking get() returns it at once and waits 0.1 s more for the next
            self.batch.append(cur)
            self.collect_until = self.sim.now + QUEUE_GET_TIMEOUT_S
        else:
            self.queue.append(cur)

    def _drain(self) -> None:
        self.collecting = True
        self.batch = list(self.queue)
        self.queue.clear()
        self.collect_until = self.sim.now + QUEUE_GET_TIMEOUT_S
        self.sim.at(self.collect_until, self._collected)

    def _collected(self) -> None:
        if self.sim.now < self.collect_until - _EPS:
            self.sim.at(self.collect_until, self._collected)
            return
        self.collecting = False
        batch, self.batch = self.batch, []
        if not batch:
            self.sim.after(BATCH_INTERVAL_S, self._drain)
            return
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        self.waiting = deque(batch)
        self.outstanding = len(batch)
        self.results = []
        self._start_workers()

    def _start_workers(self) -> None:
        while self.waiting and self.running < self.workers:
            cur = self.waiting.popleft()
            self.running += 1
            cur.hold = self.recorder.hold(self.sim.now, "worker")
            self._send(cur, 0)

    # -- one call in its worker thread: litellm -> openai SDK ------------------------------
    def _send(self, cur: Cursor, retries_done: int) -> None:
        # a worker's call: its record and its slot are the cursor's by now
        record, hold = cast(CallRecord, cur.record), cast(SlotHold, cur.hold)
        attempt = self.link.send(record, lambda a: self._answered(cur, a, retries_done), hold=cur.hold)
        cur.attempt = attempt
        if attempt.hung:
            hold.hung_since = self.sim.now
        self.sim.after(SDK_TIMEOUT_S, lambda: self._timed_out(cur, attempt, retries_done))

    def _answered(self, cur: Cursor, attempt: Attempt, retries_done: int) -> None:
        if attempt.answer.admitted:
            self._worker_done(cur, True)
        elif retries_done < SDK_MAX_RETRIES:
            wait = sdk_backoff(self.rng, attempt.answer.retry_after_s, retries_done)
            self.sim.after(wait, lambda: self._send(cur, retries_done + 1))
        else:
            self._worker_done(cur, False)         # RateLimitError -> 429 LLMResponse

    def _timed_out(self, cur: Cursor, attempt: Attempt, retries_done: int) -> None:
        if attempt.ended_at is not None:
            return
        self.sdk_timeouts += 1
        attempt.abandon(self.sim.now)
        if retries_done < SDK_MAX_RETRIES:
            wait = sdk_backoff(self.rng, None, retries_done)
            self.sim.after(wait, lambda: self._send(cur, retries_done + 1))
        else:
            self._worker_done(cur, False)         # APITimeoutError -> 408 LLMResponse

    def _worker_done(self, cur: Cursor, ok: bool) -> None:
        if ok:
            # The provider answered, but the agent learns it only when the batch returns
            # (_batch_done): until then the call is not completed, for the metrics either.
            cast(CallRecord, cur.record).completed_at = None
        self.recorder.release(self.sim.now, cur.hold)
        cur.hold = None
        self.running -= 1
        self.results.append((cur, ok))
        self.outstanding -= 1
        if self.outstanding == 0:
            self._batch_done()
        else:
            self._start_workers()

    def _batch_done(self) -> None:
        """_process_batch_for_model returned: every syscall of the batch gets its response
        now; the loop sleeps 1 s before it drains again."""
        now = self.sim.now
        results, self.results = self.results, []
        for cur, ok in results:
            if ok:
                cast(CallRecord, cur.record).completed_at = now     # the agent sees the answer only now
                self.call_done(cur)
            else:
                self.agent_retry(cur)
        self.sim.after(BATCH_INTERVAL_S, self._drain)

    # -- tools: one thread for the whole kernel -------------------------------------------
    def call_done(self, cur: Cursor) -> None:
        if cur.call_index + 1 >= len(cur.run.calls):
            super().call_done(cur)               # the run is over: no tool call follows
            return
        cur.call_index += 1
        self.tool_queue.append(cur)
        self._pump_tools()

    def _pump_tools(self) -> None:
        if self.tool_busy or not self.tool_queue:
            return
        cur = self.tool_queue.popleft()
        self.tool_busy = True
        # the tool that ran after the previous call (call_index already points at the next)
        tool_s = cur.run.calls[cur.call_index - 1].tool_after_s
        self.sim.after(tool_s, lambda: self._tool_done(cur))

    def _tool_done(self, cur: Cursor) -> None:
        self.tool_busy = False
        self._begin_call(cur)
        self._pump_tools()

    def finish(self) -> None:
        self.recorder.notes["aios"] = {"batches": self.batches, "largest_batch": self.largest_batch,
                                       "sdk_timeouts": self.sdk_timeouts, "tool_queue_at_end": len(self.tool_queue)}
