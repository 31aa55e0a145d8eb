// End-to-end client for celflow driven by the npm `openai` package (pinned in
// package.json / package-lock.json). It proves that a real OpenAI SDK, not only
// openai-go, reads celflow's replies: JSON, SSE and errors.
//
// Contract: CELFLOW_URL is the base URL of a running celflow (e.g.
// http://127.0.0.1:8080) in front of the simulators with the shipped E/P/D
// workflow. Without CELFLOW_URL but with CELFLOW_DEMO_BIN (the celflow-demo
// binary, bin/celflow-demo after make build), the script starts
// `$CELFLOW_DEMO_BIN --serve` itself and uses the URL its curl hint prints.
// The LAST line printed is `N passed, M failed`; the exit code is 0 only when
// every case passed (1 on a failed case, 2 when there is nothing to test).
import { spawn } from 'node:child_process';
import { deflateSync } from 'node:zlib';
import OpenAI from 'openai';
import { VERSION as OPENAI_VERSION } from 'openai/version';

const MODEL = process.env.CELFLOW_MODEL || 'celflow-sim';
const CASE_TIMEOUT_MS = 30_000; // per HTTP request (the client's timeout)
const TOTAL_TIMEOUT_MS = 180_000; // the whole run, stack start included
const START_TIMEOUT_MS = 60_000; // `celflow-demo --serve` until it prints its URL

// ---------------------------------------------------------------- assertions

class AssertionFailed extends Error {}

function check(cond, msg) {
  if (!cond) throw new AssertionFailed(msg);
}

function eq(got, want, what) {
  check(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

const FINISH = new Set(['stop', 'length']);
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

// ------------------------------------------------------------ a tiny PNG

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function pngChunk(type, data) {
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}

// tinyPNG returns a valid w×h 8-bit RGB PNG (a colour gradient), built here so
// the test ships no binary fixture.
export function tinyPNG(w = 8, h = 8) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // bit depth 8, colour type RGB, deflate, no filter, no interlace
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) {
    const row = y * (1 + 3 * w); // filter byte 0 (None) at raw[row]
    for (let x = 0; x < w; x++) raw.set([(x * 255) / w, (y * 255) / h, 128], row + 1 + 3 * x);
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

// ------------------------------------------------------------------- cases

function cases(client) {
  const chatBody = (content, extra = {}) => ({
    model: MODEL,
    messages: [{ role: 'user', content }],
    max_tokens: 8,
    ...extra,
  });
  const pngURI = `data:image/png;base64,${tinyPNG().toString('base64')}`;
  const question = 'What colours does this picture have?';
  let textPromptTokens = -1; // set by the text chat, compared by the image chat

  return [
    ['chat, non-streaming', async () => {
      const rid = 'node-e2e-chat';
      const { data, response } = await client.chat.completions
        .create(chatBody(question), { headers: { 'x-request-id': rid } })
        .withResponse();
      eq(response.status, 200, 'status');
      eq(response.headers.get('x-request-id'), rid, 'x-request-id (a valid client id is kept)');
      eq(data.object, 'chat.completion', 'object');
      eq(data.choices.length, 1, 'choices');
      const c = data.choices[0];
      eq(c.message.role, 'assistant', 'role');
      check(typeof c.message.content === 'string' && c.message.content.length > 0, `empty content: ${JSON.stringify(c.message)}`);
      check(FINISH.has(c.finish_reason), `finish_reason ${c.finish_reason}`);
      check(data.usage && data.usage.prompt_tokens > 0, `usage.prompt_tokens: ${JSON.stringify(data.usage)}`);
      check(data.usage.completion_tokens > 0 && data.usage.completion_tokens <= 8,
        `usage.completion_tokens ${data.usage.completion_tokens} not in 1..max_tokens 8`);
      textPromptTokens = data.usage.prompt_tokens;
    }],

    ['chat, streaming', async () => {
      const rid = 'node-e2e-stream';
      const { data: stream, response } = await client.chat.completions
        .create(chatBody(question, { stream: true, stream_options: { include_usage: true } }),
          { headers: { 'x-request-id': rid } })
        .withResponse();
      eq(response.status, 200, 'status');
      check((response.headers.get('content-type') || '').startsWith('text/event-stream'),
        `content-type ${response.headers.get('content-type')}`);
      eq(response.headers.get('x-request-id'), rid, 'x-request-id');
      const chunks = [];
      for await (const ch of stream) {
        chunks.push(ch);
        check(chunks.length <= 10_000, 'more than 10000 chunks');
      }
      check(chunks.length >= 3, `only ${chunks.length} chunks`);
      for (const ch of chunks) {
        eq(ch.object, 'chat.completion.chunk', 'chunk object');
        eq(ch.id, chunks[0].id, 'chunk id (one id per stream)');
      }
      eq(chunks[0].choices[0]?.delta?.role, 'assistant', 'first chunk delta.role');
      const content = chunks.map((ch) => ch.choices[0]?.delta?.content ?? '').join('');
      check(content.length > 0, 'no content in the stream');
      const finishes = chunks.filter((ch) => ch.choices[0]?.finish_reason);
      eq(finishes.length, 1, 'chunks with a finish_reason');
      check(FINISH.has(finishes[0].choices[0].finish_reason), `finish_reason ${finishes[0].choices[0].finish_reason}`);
      const last = chunks[chunks.length - 1];
      eq(last.choices.length, 0, 'usage chunk choices (include_usage)');
      check(last.usage && last.usage.completion_tokens > 0 && last.usage.completion_tokens <= 8,
        `usage chunk: ${JSON.stringify(last.usage)}`);
    }],

    ['completions', async () => {
      const { data, response } = await client.completions
        .create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8 })
        .withResponse();
      eq(response.status, 200, 'status');
      const rid = response.headers.get('x-request-id') || '';
      check(UUID_V4.test(rid), `x-request-id ${JSON.stringify(rid)}: celflow mints a UUIDv4 when the client sends none`);
      eq(data.object, 'text_completion', 'object');
      eq(data.choices.length, 1, 'choices');
      check(typeof data.choices[0].text === 'string' && data.choices[0].text.length > 0, 'empty text');
      check(FINISH.has(data.choices[0].finish_reason), `finish_reason ${data.choices[0].finish_reason}`);
      check(data.usage && data.usage.completion_tokens > 0 && data.usage.completion_tokens <= 8,
        `usage: ${JSON.stringify(data.usage)}`);
    }],

    ['chat with an inline PNG', async () => {
      const { data, response } = await client.chat.completions
        .create(chatBody([
          { type: 'text', text: question },
          { type: 'image_url', image_url: { url: pngURI } },
        ]))
        .withResponse();
      eq(response.status, 200, 'status');
      const c = data.choices[0];
      check(typeof c.message.content === 'string' && c.message.content.length > 0, 'empty content');
      check(FINISH.has(c.finish_reason), `finish_reason ${c.finish_reason}`);
      // The image became placeholder tokens in the rendered prompt.
      check(textPromptTokens < 0 || data.usage.prompt_tokens > textPromptTokens,
        `prompt_tokens with the image ${data.usage.prompt_tokens} not above the text-only ${textPromptTokens}`);
    }],

    ['bad data URI is a 400 invalid_media OpenAI error', async () => {
      const rid = 'node-e2e-bad-media';
      let err;
      try {
        await client.chat.completions.create(chatBody([
          { type: 'text', text: question },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,@@not*base64@@' } },
        ]), { headers: { 'x-request-id': rid } });
      } catch (e) {
        err = e;
      }
      check(err instanceof OpenAI.APIError, `want an APIError, got ${err}`);
      check(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err.constructor.name}`);
      eq(err.status, 400, 'status');
      eq(err.code, 'invalid_media', 'error.code');
      eq(err.type, 'invalid_request_error', 'error.type');
      eq(err.param, null, 'error.param');
      eq(err.requestID, rid, 'x-request-id on the error reply');
      check(typeof err.error?.message === 'string' && err.error.message.endsWith(`(request_id: ${rid})`),
        `error.message ${JSON.stringify(err.error?.message)} does not end with the request id`);
    }],

    ['models.list() reads GET /v1/models (the SDK\'s usual first call)', async () => {
      const ids = [];
      for await (const m of client.models.list()) {
        eq(m.object, 'model', 'model.object');
        check(typeof m.id === 'string' && m.id.length > 0, `model id ${JSON.stringify(m.id)}`);
        ids.push(m.id);
      }
      check(ids.length > 0, 'no models listed');
    }],

    ['unknown route is a 404 not_found OpenAI error', async () => {
      let err;
      try {
        await client.embeddings.create({ model: 'm', input: 'x' });
      } catch (e) {
        err = e;
      }
      check(err instanceof OpenAI.NotFoundError, `want NotFoundError for /v1/embeddings, got ${err}`);
      eq(err.code, 'not_found', 'error.code');
      eq(err.type, 'invalid_request_error', 'error.type');
    }],
  ];
}

// ------------------------------------------------------------ stack start

let demoPid = 0; // process group of a self-started stack, for the watchdog

// startDemo runs `$CELFLOW_DEMO_BIN --serve` in its own process group and
// resolves with its base URL, read from the curl command it prints.
function startDemo(bin) {
  const child = spawn(bin, ['--serve'], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  demoPid = child.pid;
  const logs = [];
  const keep = (d) => {
    logs.push(String(d));
    if (logs.length > 200) logs.shift();
  };
  child.stderr.on('data', keep);
  const url = new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`no URL from '${bin} --serve' within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
    child.stdout.on('data', (d) => {
      keep(d);
      buf += d;
      const m = /curl\b[^\n]*?(https?:\/\/(?:127\.0\.0\.1|localhost|\[::1\]):\d+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`demo exited with ${code} before printing a URL`)); });
  });
  const stop = () => new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const kill = (sig) => { try { process.kill(-child.pid, sig); } catch { /* already gone */ } };
    const hard = setTimeout(() => kill('SIGKILL'), 10_000);
    child.once('exit', () => { clearTimeout(hard); resolve(); });
    kill('SIGTERM');
  });
  return { url, stop, logs };
}

// -------------------------------------------------------------------- main

async function main() {
  let base = process.env.CELFLOW_URL;
  let demo;
  if (!base && process.env.CELFLOW_DEMO_BIN) {
    demo = startDemo(process.env.CELFLOW_DEMO_BIN);
    try {
      base = await demo.url;
    } catch (e) {
      await demo.stop();
      console.log(`FAIL stack start: ${e.message}\n${demo.logs.join('').slice(-4000)}`);
      console.log('0 passed, 1 failed');
      return 1;
    }
  }
  if (!base) {
    console.log('CELFLOW_URL (a running celflow) or CELFLOW_DEMO_BIN (to start `celflow-demo --serve`) is required; see README.md');
    console.log('0 passed, 0 failed');
    return 2;
  }
  const client = new OpenAI({
    baseURL: `${base.replace(/\/+$/, '')}/v1`,
    apiKey: process.env.OPENAI_API_KEY || 'celflow-e2e',
    maxRetries: 0,
    timeout: CASE_TIMEOUT_MS,
  });
  console.log(`celflow at ${base}, openai ${OPENAI_VERSION}`);

  let passed = 0;
  let failed = 0;
  try {
    for (const [name, fn] of cases(client)) {
      try {
        await fn();
        passed++;
        console.log(`ok   ${name}`);
      } catch (e) {
        failed++;
        const why = e instanceof AssertionFailed ? e.message : (e?.stack || String(e));
        console.log(`FAIL ${name}: ${why}`);
      }
    }
  } finally {
    if (demo) await demo.stop();
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

// The whole run is bounded: a hung stack fails the run instead of CI's job.
const watchdog = setTimeout(() => {
  if (demoPid) {
    try { process.kill(-demoPid, 'SIGKILL'); } catch { /* already gone */ }
  }
  console.log(`FAIL run exceeded ${TOTAL_TIMEOUT_MS} ms`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}, TOTAL_TIMEOUT_MS);
watchdog.unref();

// Self-check of the PNG encoder: the CRC of the IEND chunk type is fixed by
// the PNG spec, so a broken encoder fails here, not as a celflow error.
if (crc32(Buffer.from('IEND', 'ascii')) !== 0xae426082) {
  console.log('FAIL png encoder self-check');
  console.log('0 passed, 1 failed');
  process.exit(1);
}

process.exitCode = await main();
