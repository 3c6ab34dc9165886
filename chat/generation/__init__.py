"""The path of one answer, top to bottom.

turn.py      the turn's context: user, plan and period, model, limits, priority (worked out once)
assemble.py  the prompt: system prompt, summary, the newest turns that fit; what can never fit (413)
admit.py     rate limit, moderation, admission control, quota reservation (admission.py: the count)
start.py     one trip to the database: load, admit, persist the question and the answer's placeholder
run.py       the runner: the engine's stream, coalesced frames, heartbeats, stop
engine.py    the shared engine client and the events the runner reads
streams.py   per-answer token streams, fanned out to every reader in the process
follow.py    one answer's frames for a reader (SSE and WebSocket alike)
settle.py    final state, the ledger row, the stream closed, every tab told
reap.py      answers whose runner died, ended as interrupted
actions.py   what the transports call: send, regenerate, edit, stop
"""
