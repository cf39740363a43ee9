#!/usr/bin/env python3
"""examples/llm/generate.c (include/kiln/llm.h from C, through libkiln.so) on the tests'
gpt2-tiny decoder: four prompts decoded together; the tokens it streams through the callback and
the tokens it reads back both equal PyTorch's greedy decode (reference.json), the last of each
request flagged; a token id outside the vocabulary exits 1 with Kiln's message, a prompt that
is not a list of ids exits 2.

usage: llm_example_test.py GENERATE_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys

NEW_TOKENS = 20


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "gpt2-tiny")
    with open(os.path.join(model, "reference.json")) as f:
        ref = json.load(f)["sequences"][:4]
    prompts = [",".join(map(str, s["prompt"])) for s in ref]
    r = subprocess.run([binary, model, str(NEW_TOKENS)] + prompts, capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    streamed, final, last = {}, {}, {}
    for line in r.stdout.splitlines():
        words = line.split()
        if words[0] == "token":
            streamed.setdefault(int(words[1]), []).append(int(words[2]))
            if words[-1] == "last":
                last[int(words[1])] = len(streamed[int(words[1])])
        elif words[0] == "request":
            final[int(words[1].rstrip(":"))] = [int(w) for w in words[2:]]
    for i, s in enumerate(ref):
        want = s["tokens"][:NEW_TOKENS]
        assert final.get(i) == want, f"request {i}: {final.get(i)}, PyTorch {want}"
        assert streamed.get(i) == want, f"request {i} streamed {streamed.get(i)}, PyTorch {want}"
        assert last.get(i) == NEW_TOKENS, f"request {i}: last flag at {last.get(i)}"
    assert "KV cache:" in r.stdout and "0 used now" in r.stdout, r.stdout
    bad = subprocess.run([binary, model, "4", "1,512,3"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 1 and "outside the vocabulary" in bad.stderr, (bad.returncode, bad.stderr)
    bad = subprocess.run([binary, model, "4", "1,x"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    print(f"generate: {len(ref)} requests x {NEW_TOKENS} tokens equal PyTorch's, streamed and read back")


if __name__ == "__main__":
    main()
