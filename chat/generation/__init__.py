"""The path of one answer, for every transport (docs/ARCHITECTURE.md draws it).

turn.py        the turn's context: user, plan and period, model, limits, priority (worked out once)
assemble.py    the prompt: system prompts, summary, the newest turns that fit; what can never fit (413)
admission.py   the count of generations in flight and the engines' load: who may start now
engine.py      the engine request (Job), routing it, the shared engine client and its events
admit.py       the one order of admission: serving model, prompt, rate limit, moderation, place, quota
start.py       a saved answer's start: load, admit, persist the question and the placeholder, route
completion.py  a program's completion and the product's own work: admitted, routed, read by one caller
run.py         the driver: engine stream, moderation windows, busy waits, heartbeat, stop, settlement
answer.py      a saved answer's destination: frames on its token stream, checkpoints, its final write
settle.py      how it ended: status, the usage rule, the bill, a saved answer's final write
streams/       per-answer token streams, fanned out to every reader in the process (base, redis, local)
follow.py      one answer's frames for a reader (SSE and WebSocket alike)
notify.py      every open tab of a user told what started, ended or changed
reap.py        answers whose runner died, ended as interrupted and billed by the same rule
actions.py     what the chat's transports call: send, regenerate, edit, stop
"""
