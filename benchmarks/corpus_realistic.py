"""A realistic agent corpus: long tool outputs, CJK, tool calls, one very long session.

The synthetic corpus of :mod:`_common` has ~100-character messages; an agent's real
transcripts are dominated by tool output. This generator builds, deterministically from a
seed (``random.Random`` only), the shape measured on real stores:

* 200,000 messages over 348 sessions, one of them 20,000 messages long (``scale``
  multiplies both message counts; the session count stays);
* about 37% of rows are tool outputs of 1–16 KB (log-uniform: most are a few KB):
  terminal listings, file contents, JSON, logs; some of them in Chinese;
* user and assistant chat of a sentence to a few paragraphs, ~10% in Chinese;
* assistant turns that call tools carry ``tool_calls`` JSON (function name and JSON
  arguments), ``finish_reason="tool_calls"`` and sometimes two parallel calls; each call
  is answered by a tool row with its ``tool_call_id`` and ``name``.

The planted search terms of :mod:`_common` (selective, mid, common, CJK) are planted at
the same row shares, so the search benchmark can run on either corpus.

    python benchmarks/corpus_realistic.py [--scale 0.05]   # prints the corpus' statistics
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

SEED = 20251130
MESSAGES = 200_000
SESSIONS = 348
LONG_SESSION_MESSAGES = 20_000
LONG_SESSION = "realistic-long"
TOOL_OUTPUT_BYTES = (1024, 16 * 1024)
CJK_CHAT_SHARE = 0.10
CJK_TOOL_SHARE = 0.08
# Tool rounds per user turn: the chance of one more round. 0.69 gives ~37% tool rows.
MORE_TOOLS = 0.69
PARALLEL_CALLS = 0.12


def _words(text: str) -> list[str]:
    return text.split()


_WORDS = _words(
    "the a to of and in is it that for on with this be as you not are we can will "
    "file function test error build deploy config server request response database "
    "query index migration schema value result output input path directory branch "
    "commit merge review change update fix bug issue check run install package "
    "module import class method return type string list dict number timeout retry "
    "cache log let me look at first then now should would could here there because "
    "so but if"
)
_CJK = _words(
    "我们 需要 检查 这个 文件 的 配置 错误 信息 服务器 请求 返回 结果 测试 "
    "部署 分支 提交 合并 问题 修复 日志 缓存 超时 重试 模块 函数 "
    "输出 输入 目录 路径 看起来 已经 完成 现在 然后 因为 所以 但是 如果 可以 应该 运行 安装 更新"
)
_TOOLS = ("terminal", "read_file", "search_files", "write_file", "web_search", "patch")
_CMDS = (
    "ls -la",
    "git status",
    "pytest -q tests/unit",
    "grep -rn TODO src",
    "cat README.md",
    "python -m build",
    "docker ps",
    "du -sh *",
)


def _sentence(rng: Random, lo: int, hi: int) -> str:
    words = rng.choices(_WORDS, k=rng.randint(lo, hi))
    return " ".join(words).capitalize() + "."


def _cjk_sentence(rng: Random, lo: int, hi: int) -> str:
    return "".join(rng.choices(_CJK, k=rng.randint(lo, hi))) + "。"


def _line_pool(rng: Random, n: int, cjk: bool) -> list[str]:
    """Lines a tool prints: listings, log lines, code, JSON; Chinese ones with ``cjk``."""
    out = []
    for i in range(n):
        kind = rng.randrange(5)
        if cjk and rng.random() < 0.6:
            out.append(f"[{i:05d}] " + _cjk_sentence(rng, 4, 14))
        elif kind == 0:
            name = "_".join(rng.choices(_WORDS, k=2))
            out.append(
                f"-rw-r--r--  1 agent staff {rng.randint(10, 99999):>6} "
                f"Nov {rng.randint(1, 30):>2} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
                f"{name}.py"
            )
        elif kind == 1:
            out.append(
                f"2025-11-{rng.randint(1, 30):02d}T{rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z "
                f"{rng.choice(('INFO', 'WARN', 'ERROR', 'DEBUG'))} {_sentence(rng, 4, 12)}"
            )
        elif kind == 2:
            a, b = rng.choices(_WORDS, k=2)
            out.append(f"    def {a}_{b}(self, {b}: int = {rng.randint(0, 99)}) -> str:")
        elif kind == 3:
            out.append(
                json.dumps({"id": rng.randint(1, 10**6), "status": rng.choice(_WORDS)}) + ","
            )
        else:
            out.append(f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py:{rng.randint(1, 900)}: ")
    return out


@dataclass(frozen=True)
class Layout:
    """Which session gets how many messages (the long one first)."""

    sessions: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.sessions)

    @property
    def ids(self) -> list[str]:
        return [sid for sid, _ in self.sessions]


def layout(scale: float = 1.0, *, seed: int = SEED) -> Layout:
    """348 sessions holding ``200,000 * scale`` messages, one of ``20,000 * scale``."""
    rng = Random(seed)
    total = max(SESSIONS * 4, int(MESSAGES * scale))
    long_n = max(8, int(LONG_SESSION_MESSAGES * scale))
    rest = total - long_n
    # Session lengths are skewed (many short, a few long): log-normal weights.
    weights = [rng.lognormvariate(0, 1.0) for _ in range(SESSIONS - 1)]
    k = sum(weights)
    sizes = [max(2, int(rest * w / k)) for w in weights]
    sizes[0] += rest - sum(sizes)  # exact total
    sessions = [(LONG_SESSION, long_n)] + [
        (f"realistic-{i:03d}", n) for i, n in enumerate(sizes, start=1)
    ]
    return Layout(tuple(sessions))


class RealisticCorpus:
    """Deterministic realistic messages; same ``messages()`` interface as ``Corpus``.

    ``selective_hits``: plant the selective term in exactly that many rows of each
    ``messages()`` call, as ``Corpus`` does (the search benchmark's one conversation);
    None: a share per row, so the whole multi-session corpus holds about
    ``SELECTIVE_HITS`` of them however it is cut into conversations.
    """

    def __init__(self, seed: int = SEED, *, selective_hits: int | None = None) -> None:
        rng = Random(seed)
        self.seed = seed
        self.selective_hits = selective_hits
        self.lines = _line_pool(rng, 3000, cjk=False)
        self.cjk_lines = _line_pool(rng, 1500, cjk=True)

    def _tool_output(self, rng: Random, cjk: bool) -> str:
        lo, hi = TOOL_OUTPUT_BYTES
        target = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        pool = self.cjk_lines if cjk else self.lines
        start = rng.randrange(len(pool))
        parts: list[str] = []
        size = 0
        i = start
        while size < target:
            line = pool[i % len(pool)]
            parts.append(line)
            size += len(line.encode()) + 1
            i += rng.randint(1, 7)
        text = "\n".join(parts)
        # Cut at the target byte size (on a character boundary).
        return text.encode()[:target].decode(errors="ignore")

    def _chat(self, rng: Random, role: str) -> str:
        if rng.random() < CJK_CHAT_SHARE:
            return "".join(_cjk_sentence(rng, 3, 20) for _ in range(rng.randint(1, 6)))
        n = rng.randint(1, 3) if role == "user" else rng.randint(1, 12)
        return " ".join(_sentence(rng, 5, 24) for _ in range(n))

    def _turns(self, rng: Random, tag: str) -> Iterator[dict[str, Any]]:
        call_no = 0
        while True:
            yield {"role": "user", "content": self._chat(rng, "user")}
            while rng.random() < MORE_TOOLS:
                calls = []
                for _ in range(2 if rng.random() < PARALLEL_CALLS else 1):
                    call_no += 1
                    tool = rng.choice(_TOOLS)
                    args = {"command": rng.choice(_CMDS), "timeout": rng.choice((30, 60, 120))}
                    if tool != "terminal":
                        args = {"path": f"src/{rng.choice(_WORDS)}.py", "limit": 400}
                    calls.append(
                        {
                            "id": f"call_{tag}_{call_no}",
                            "type": "function",
                            "function": {"name": tool, "arguments": json.dumps(args)},
                        }
                    )
                content = self._chat(rng, "assistant") if rng.random() < 0.5 else ""
                yield {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": calls,
                    "finish_reason": "tool_calls",
                }
                for call in calls:
                    yield {
                        "role": "tool",
                        "content": self._tool_output(rng, rng.random() < CJK_TOOL_SHARE),
                        "tool_call_id": call["id"],
                        "name": call["function"]["name"],
                    }
            yield {
                "role": "assistant",
                "content": self._chat(rng, "assistant"),
                "finish_reason": "stop",
            }

    def messages(self, n: int, *, seed_offset: int = 0, plant: bool = True) -> list[dict[str, Any]]:
        """``n`` messages of one conversation (timestamps rising by 0.5 s).

        With ``plant``, :mod:`_common`'s search terms are planted at its row shares.
        """
        rng = Random(self.seed * 1_000_003 + seed_offset)
        out: list[dict[str, Any]] = []
        ts = 1_730_000_000.0 + seed_offset * 10_000.0
        for msg in self._turns(rng, str(seed_offset)):
            if len(out) == n:
                break
            ts += 0.5
            msg["timestamp"] = ts
            out.append(msg)
        if plant:
            _plant(out, rng, self.selective_hits)
        return out

    def conversations(self, plan: Layout) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Every session of ``plan`` with its messages (one generated at a time)."""
        for i, (sid, n) in enumerate(plan.sessions):
            yield sid, self.messages(n, seed_offset=i)


def _plant(msgs: list[dict[str, Any]], rng: Random, selective_hits: int | None) -> None:
    # Imported here, not at the top: _common imports this module.
    from _common import (
        CJK1_RARE_HITS,
        CJK1_RARE_TERM,
        CJK3_SHARE,
        CJK3_TERM,
        COMMON_SHARE,
        COMMON_TERM,
        MID_SHARE,
        MID_TERM,
        SELECTIVE_HITS,
        SELECTIVE_TERM,
    )

    n = len(msgs)
    idx = range(n)
    for term, count in (
        (COMMON_TERM, int(n * COMMON_SHARE)),
        (MID_TERM, int(n * MID_SHARE)),
        (CJK3_TERM, int(n * CJK3_SHARE)),
    ):
        for i in rng.sample(idx, count):
            text = msgs[i]["content"]
            at = rng.randint(0, len(text))
            sep = "" if term == CJK3_TERM else " "
            msgs[i]["content"] = text[:at] + sep + term + sep + text[at:]
    if selective_hits is not None:
        # An exact count in this conversation: a "selective" query with no hit at all
        # would measure the substring fallback, not the selective route.
        for i in rng.sample(idx, min(n, selective_hits)):
            msgs[i]["content"] += " " + SELECTIVE_TERM
        # And the rare 1-character CJK query of the LIKE path, at its exact count too.
        for i in rng.sample(idx, min(n, CJK1_RARE_HITS)):
            msgs[i]["content"] += CJK1_RARE_TERM
        return
    # The selective term: about SELECTIVE_HITS rows in the full corpus, however it is cut
    # into conversations (a share per row, not a count per conversation).
    for i in idx:
        if rng.random() < SELECTIVE_HITS / MESSAGES:
            msgs[i]["content"] += " " + SELECTIVE_TERM


def stats(msgs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Shares and sizes, to check the generator against the shape it promises."""
    tool = [m for m in msgs if m["role"] == "tool"]
    sizes = sorted(len(m["content"].encode()) for m in tool)
    cjk = sum(1 for m in msgs if any("\u4e00" <= ch <= "\u9fff" for ch in m["content"][:400]))
    return {
        "messages": len(msgs),
        "tool_share": round(len(tool) / max(1, len(msgs)), 3),
        "tool_bytes_min_median_max": (sizes[0], sizes[len(sizes) // 2], sizes[-1])
        if sizes
        else None,
        "with_tool_calls": sum(1 for m in msgs if m.get("tool_calls")),
        "cjk_rows": cjk,
        "content_mb": round(sum(len(m["content"].encode()) for m in msgs) / 1e6, 1),
    }


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.05)
    a = p.parse_args()
    plan = layout(a.scale)
    corpus = RealisticCorpus()
    print(f"{len(plan.sessions)} sessions, {plan.total:,} messages")
    print(stats(corpus.messages(plan.sessions[0][1])))
