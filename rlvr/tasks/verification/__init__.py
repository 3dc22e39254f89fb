"""The verification layer: how a completion is judged. `answers` extracts an answer from text,
`grading` compares it with the ground truth, `verifiers` is the registry of named verifiers a task
uses, `judging` guards every call of a task's `score` (exceptions, wrong types, unusable rewards),
`safe_parse` reads arithmetic without running code, and `sandbox` / `worker` run verifiers that need
code in a separate, limited process.
"""
