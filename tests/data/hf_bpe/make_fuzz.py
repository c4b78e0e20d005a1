#!/usr/bin/env python3
"""Writes fuzz.jsonl: 100 seeded random documents mixing the scripts and tricky characters the
byte-level BPE must agree with the reference on (ASCII, odd spaces, Latin, combining marks,
Greek, Cyrillic, Hebrew, Arabic, CJK, Hangul, emoji parts, contractions, added-token text).
The output is checked in; re-running reproduces it.   python3 make_fuzz.py > fuzz.jsonl"""
import json
import random

random.seed(7)
pools = [
    [chr(c) for c in range(0x20, 0x7F)] * 4,
    list("\t\n\r  \u00a0\u2003\u3000\u2028\u0085\ufeff\u200b"),
    [chr(c) for c in range(0xA1, 0x250)],
    [chr(c) for c in range(0x300, 0x370)],
    [chr(c) for c in range(0x391, 0x3CA)] + [chr(c) for c in range(0x410, 0x450)],
    [chr(c) for c in range(0x5D0, 0x5EB)] + [chr(c) for c in range(0x627, 0x64B)]
    + [chr(c) for c in range(0x660, 0x66A)],
    [chr(c) for c in range(0x4E00, 0x4E00 + 3000)] + [chr(c) for c in range(0x3041, 0x3097)]
    + [chr(c) for c in range(0xAC00, 0xAC00 + 500)],
    ["\U0001F44D", "\U0001F3FD", "\u200d", "\U0001F468", "\U0001F469", "\u2764", "\ufe0f",
     "\U0001F1FA", "\U0001F1F8", "\U0001F600"],
    ["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "<|endoftext|>", "<think>",
     "<|im_start|>", "0123", "3.14", "I'M", "\u017f"],
    [chr(c) for c in range(0x1E00, 0x1F00)] + ["\ufb01", "\u212b", "\u2126", "\u00c5"],
]
for _ in range(100):
    n = random.randint(1, 120)
    text = "".join(random.choice(random.choice(pools)) for _ in range(n))
    print(json.dumps({"text": text}))
