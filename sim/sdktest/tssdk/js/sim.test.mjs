// Conformance test of the sluice simulator against the official TypeScript
// SDK (@anthropic-ai/sdk, pinned in package.json). It is run by the Go test
// in ../tssdk_test.go, which starts the simulator and passes:
//
//   SIM_BASE_URL     a three-org world at TimeScale 1000 (batches end fast)
//   SIM_LIMITED_URL  a world whose Sonnet 4 lane (for SIM_KEY's org) is a
//                    one-request bucket that refills in
//                    SIM_LIMITED_REFILL_SECONDS: one call fits, the next
//                    gets a 429 with retry-after
//   SIM_LIMITED_REFILL_SECONDS  that refill time, whole seconds
//   SIM_KEY          a key known to both worlds
//   SIM_MODEL        a model id of the Sonnet 4 pool
//
// Run by hand: start `sluice sim`, set the variables, `node --test sim.test.mjs`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { env, sleep, textOf, paramsFor } from './helpers.mjs';

const baseURL = env('SIM_BASE_URL');
const limitedURL = env('SIM_LIMITED_URL');
const apiKey = env('SIM_KEY');
const model = env('SIM_MODEL');
const refillSeconds = Number(env('SIM_LIMITED_REFILL_SECONDS'));

const params = paramsFor(model);

test('messages.create: sim text, usage and response headers', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey, baseURL, maxRetries: 0 });
  const { data: msg, response } = await client.messages.create(params('Say hello to the TS SDK.')).withResponse();

  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, model);
  assert.match(msg.id, /^msg_/);
  const text = textOf(msg);
  assert.ok(text.startsWith('sim-'), `text should start with "sim-": ${JSON.stringify(text)}`);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), `stop_reason ${msg.stop_reason}`);
  assert.ok(msg.usage.input_tokens > 0, `input_tokens ${msg.usage.input_tokens}`);
  assert.ok(msg.usage.output_tokens > 0, `output_tokens ${msg.usage.output_tokens}`);
  assert.ok(msg.usage.output_tokens <= 64, `output_tokens ${msg.usage.output_tokens} > max_tokens`);

  assert.equal(response.status, 200);
  const h = response.headers;
  assert.match(h.get('request-id') ?? '', /^req_/, 'request-id header');
  assert.ok(h.get('anthropic-organization-id'), 'anthropic-organization-id header');
  const limit = Number(h.get('anthropic-ratelimit-requests-limit'));
  assert.ok(limit > 0, `anthropic-ratelimit-requests-limit ${h.get('anthropic-ratelimit-requests-limit')}`);
  assert.ok(h.get('anthropic-ratelimit-requests-remaining') !== null, 'anthropic-ratelimit-requests-remaining');
  assert.ok(!Number.isNaN(Date.parse(h.get('anthropic-ratelimit-requests-reset') ?? '')), 'requests-reset is a date');

  // The SDK exposes the request and workspace ids on the parsed object too.
  assert.equal(msg._request_id, h.get('request-id'));
  assert.equal(msg._workspace_id, h.get('anthropic-workspace-id'));
});

test('429: RateLimitError without retries, then the SDK retry honours retry-after', { timeout: 30_000 }, async () => {
  const client = new Anthropic({ apiKey, baseURL: limitedURL, maxRetries: 0 });

  // 1. The lane's bucket holds one request: this one fits.
  const first = await client.messages.create(params('first call'));
  assert.ok(textOf(first).startsWith('sim-'));

  // 2. The bucket is empty: a 429 surfaces as RateLimitError.
  let err;
  try {
    await client.messages.create(params('second call'));
    assert.fail('second call should have been rate limited');
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Anthropic.RateLimitError, `want RateLimitError, got ${err?.constructor?.name}: ${err}`);
  assert.ok(err instanceof Anthropic.APIError);
  assert.equal(err.status, 429);
  assert.equal(err.error?.type, 'error');
  assert.equal(err.error?.error?.type, 'rate_limit_error');
  assert.match(err.error?.error?.message ?? '', /rate limit/);
  assert.equal(err.type, 'rate_limit_error');
  const retryAfter = err.headers.get('retry-after');
  assert.ok(retryAfter !== null, 'a 429 carries retry-after');
  // A time-scaled world sends fractional seconds (a whole second would be K
  // simulated seconds); the SDK parses either.
  assert.match(retryAfter, /^[0-9]+(\.[0-9]+)?$/, 'retry-after is a number of seconds');
  assert.ok(Number(retryAfter) > 0, 'retry-after is positive');
  assert.ok(Number(retryAfter) <= refillSeconds, `retry-after ${retryAfter} > the bucket's refill time ${refillSeconds} s`);
  assert.equal(err.headers.get('retry-after-ms'), null, 'retry-after-ms is off in this world');
  assert.match(err.requestID ?? '', /^req_/, 'RateLimitError.requestID');
  assert.ok(err.headers.get('anthropic-ratelimit-requests-limit'), 'a 429 carries the rate-limit headers');

  // 3. With retries the SDK sleeps retry-after and the retry fits. Its
  //    default first backoff (0.375-0.5 s) would hit a second 429.
  const t0 = Date.now();
  const third = await client.messages.create(params('third call'), { maxRetries: 3 });
  const elapsed = Date.now() - t0;
  assert.ok(textOf(third).startsWith('sim-'));
  assert.ok(elapsed >= 950, `the retry should wait for retry-after (>= 1 s), took ${elapsed} ms`);
  assert.ok(elapsed < (refillSeconds + 5) * 1000, `the retry took ${elapsed} ms`);

  // The simulator saw exactly: 2 admitted, 2 rate limited (call 2, and the
  // first attempt of call 3), i.e. the SDK retried once, not more.
  const stats = await (await fetch(new URL('/_sim/stats', limitedURL))).json();
  const lanes = Object.values(stats.orgs).flatMap((o) => Object.values(o.pools ?? {}));
  const admitted = lanes.reduce((n, l) => n + l.admitted, 0);
  const limited = lanes.reduce((n, l) => n + l.rate_limited, 0);
  assert.deepEqual({ admitted, limited }, { admitted: 2, limited: 2 });
});

test('messages.stream: finalMessage has the streamed text', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey, baseURL, maxRetries: 0 });
  const stream = client.messages.stream(params('Stream something, please.', { max_tokens: 200 }));
  let streamed = '';
  const events = [];
  stream.on('text', (delta) => {
    streamed += delta;
  });
  stream.on('streamEvent', (ev) => events.push(ev.type));
  const msg = await stream.finalMessage();

  const text = textOf(msg);
  assert.ok(text.length > 0, 'final message has text');
  assert.ok(text.startsWith('sim-'), `text should start with "sim-": ${JSON.stringify(text)}`);
  assert.equal(streamed, text, 'text deltas add up to the final text');
  assert.ok(msg.usage.input_tokens > 0);
  // message_start says output_tokens 1; the SDK must take message_delta's
  // final count (the simulator answers one token per word).
  assert.equal(msg.usage.output_tokens, text.split(' ').length, 'usage from message_delta');
  assert.ok(msg.stop_reason === 'end_turn' || msg.stop_reason === 'max_tokens', `stop_reason ${msg.stop_reason}`);
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.ok(events.includes('content_block_delta'));
});

test('batches: create, poll until ended, read 3 succeeded results', { timeout: 30_000 }, async () => {
  const client = new Anthropic({ apiKey, baseURL, maxRetries: 0 });
  const ids = ['row-a', 'row-b', 'row-c'];
  const created = await client.messages.batches.create({
    requests: ids.map((custom_id, i) => ({ custom_id, params: params(`batch question ${i}`) })),
  });
  assert.match(created.id, /^msgbatch_/);
  assert.equal(created.type, 'message_batch');
  assert.equal(created.processing_status, 'in_progress');
  assert.equal(created.request_counts.processing, 3);
  assert.equal(created.results_url, null);

  // Poll. The simulator answers 404 for a short read-after-write window
  // after create (2 s simulated), so tolerate NotFoundError for a while.
  const start = Date.now();
  let batch;
  for (;;) {
    try {
      batch = await client.messages.batches.retrieve(created.id);
    } catch (e) {
      if (!(e instanceof Anthropic.NotFoundError) || Date.now() - start > 2_000) throw e;
    }
    if (batch?.processing_status === 'ended') break;
    assert.ok(Date.now() - start < 20_000, `batch not ended after 20 s: ${JSON.stringify(batch)}`);
    await sleep(25);
  }
  assert.deepEqual(batch.request_counts, { processing: 0, succeeded: 3, errored: 0, canceled: 0, expired: 0 });
  assert.ok(batch.ended_at, 'ended_at is set');
  assert.ok(batch.results_url, 'results_url is set');

  const rows = [];
  for await (const r of await client.messages.batches.results(created.id)) rows.push(r);
  assert.deepEqual(
    rows.map((r) => r.custom_id),
    ids,
  );
  for (const r of rows) {
    assert.equal(r.result.type, 'succeeded', JSON.stringify(r));
    assert.ok(textOf(r.result.message).startsWith('sim-'), JSON.stringify(r));
    assert.equal(r.result.message.usage.service_tier, 'batch');
  }
});

test('unknown key: AuthenticationError', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey: 'sk-ant-fake-sim-nobody-9999', baseURL });
  await assert.rejects(client.messages.create(params('who am I?')), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, `want AuthenticationError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 401);
    assert.equal(e.error?.error?.type, 'authentication_error');
    assert.match(e.requestID ?? '', /^req_/);
    return true;
  });
});
