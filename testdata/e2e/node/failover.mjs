// Decode failover through the npm `openai` client (spawned by
// cmd/celflow/e2e/failover_test.go): CONCURRENCY chat streams at once against
// CELFLOW_URL, prompt i taken from the JSON array PROMPTS (i modulo its
// length), greedy sampling, MAX_TOKENS each, usage included. While they run,
// the Go test kills a decode worker.
//
// Output: `result <json>` per stream (its index,
// assembled text, finish_reason, usage completion_tokens, chunk ids seen,
// chunks with a finish_reason, error). The LAST line is `N passed, M failed`
// (a stream passes when its parser accepted every chunk and it ended with one
// finish_reason and a usage chunk under one id; the texts are compared by the
// test); exit code 0 only when every stream passed.
import OpenAI from 'openai';

const base = process.env.CELFLOW_URL;
const prompts = JSON.parse(process.env.PROMPTS || '[]');
const n = Number(process.env.CONCURRENCY || '0');
const maxTokens = Number(process.env.MAX_TOKENS || '32');
if (!base || prompts.length === 0 || n <= 0) {
  console.log('0 passed, 0 failed');
  process.exit(2);
}

const client = new OpenAI({
  baseURL: `${base.replace(/\/+$/, '')}/v1`,
  apiKey: 'celflow-e2e',
  maxRetries: 0,
  timeout: 60_000,
});

async function one(i) {
  const r = { i, text: '', finish: '', completion_tokens: 0, ids: 0, finishes: 0, error: '' };
  try {
    const stream = await client.chat.completions.create({
      model: 'e2e-model',
      messages: [{ role: 'user', content: prompts[i % prompts.length] }],
      max_tokens: maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    }, { headers: { 'x-request-id': `node-failover-${i}` } });
    const ids = new Set();
    for await (const ch of stream) {
      ids.add(ch.id);
      const c = ch.choices[0];
      if (c?.delta?.content) r.text += c.delta.content;
      if (c?.finish_reason) {
        r.finish = c.finish_reason;
        r.finishes++;
      }
      if (ch.usage) r.completion_tokens = ch.usage.completion_tokens;
    }
    r.ids = ids.size;
  } catch (e) {
    r.error = String(e?.message || e);
  }
  console.log(`result ${JSON.stringify(r)}`);
  return !r.error && r.ids === 1 && r.finishes === 1 && r.completion_tokens > 0;
}

const oks = await Promise.all(Array.from({ length: n }, (_, i) => one(i)));
const passed = oks.filter(Boolean).length;
console.log(`${passed} passed, ${n - passed} failed`);
process.exit(passed === n ? 0 : 1);
