// The official TypeScript SDK (@anthropic-ai/sdk, pinned in package.json)
// against `sluice proxy` in front of the simulator. Run by the Go test in
// ../proxy_test.go, which starts two proxies and passes:
//
//   PROXY_URL          a proxy on the three-org world
//   PROXY_TOKEN        the token both proxies require as the key
//   PROXY_SLOW_URL     a proxy with one slot, 2 s answers and a 20 ms wait
//                      limit: a second call while one is in flight gets 429
//   SIM_MODEL          a model id of the Sonnet 4 pool
//
// The program's key (the token) is never forwarded: the proxy holds the
// real ones.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { env, sleep, textOf, paramsFor } from './helpers.mjs';

const baseURL = env('PROXY_URL');
const token = env('PROXY_TOKEN');
const slowURL = env('PROXY_SLOW_URL');
const model = env('SIM_MODEL');
const wrongKey = 'sk-ant-not-the-proxy-token';

const params = paramsFor(model);

test('messages.create through the proxy', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey: token, baseURL, maxRetries: 0 });
  const { data: msg, response } = await client.messages.create(params('Hello through the proxy.')).withResponse();
  assert.equal(msg.type, 'message');
  assert.ok(textOf(msg).startsWith('sim-'), JSON.stringify(msg));
  assert.ok(msg.usage.output_tokens > 0);
  assert.match(response.headers.get('request-id') ?? '', /^req_/);
  assert.equal(msg._request_id, response.headers.get('request-id'));
  assert.ok(response.headers.get('anthropic-organization-id'), 'the answering organization is named');
});

test('messages.stream through the proxy', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey: token, baseURL, maxRetries: 0 });
  const stream = client.messages.stream(params('Stream through the proxy.', { max_tokens: 300 }));
  let streamed = '';
  const events = [];
  stream.on('text', (delta) => {
    streamed += delta;
  });
  stream.on('streamEvent', (ev) => events.push(ev.type));
  const msg = await stream.finalMessage();
  const text = textOf(msg);
  assert.ok(text.startsWith('sim-'), JSON.stringify(text));
  assert.equal(streamed, text, 'text deltas add up to the final text');
  assert.equal(msg.usage.output_tokens, text.split(' ').length, 'usage from message_delta');
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
});

test('batches through the proxy: create, poll, results, list', { timeout: 30_000 }, async () => {
  const client = new Anthropic({ apiKey: token, baseURL, maxRetries: 0 });
  const ids = ['row-a', 'row-b', 'row-c'];
  const created = await client.messages.batches.create({
    requests: ids.map((custom_id, i) => ({ custom_id, params: params(`batch question ${i}`) })),
  });
  assert.match(created.id, /^msgbatch_/);
  assert.equal(created.processing_status, 'in_progress');
  assert.equal(created.request_counts.processing, 3);
  assert.equal(created.results_url, null);
  let batch = created;
  const start = Date.now();
  while (batch.processing_status !== 'ended') {
    assert.ok(Date.now() - start < 20_000, `batch not ended: ${JSON.stringify(batch)}`);
    await sleep(10);
    batch = await client.messages.batches.retrieve(created.id);
  }
  assert.deepEqual(batch.request_counts, { processing: 0, succeeded: 3, errored: 0, canceled: 0, expired: 0 });
  assert.ok(batch.results_url.startsWith(baseURL), batch.results_url);
  const rows = [];
  for await (const r of await client.messages.batches.results(created.id)) rows.push(r);
  assert.deepEqual(
    rows.map((r) => r.custom_id),
    ids,
  );
  for (const r of rows) {
    assert.equal(r.result.type, 'succeeded', JSON.stringify(r));
    assert.ok(textOf(r.result.message).startsWith('sim-'));
  }
  const listed = [];
  for await (const b of client.messages.batches.list({ limit: 20 })) listed.push(b.id);
  assert.ok(listed.includes(created.id));
});

test('the API\'s own errors come back as the SDK\'s classes', { timeout: 20_000 }, async () => {
  const client = new Anthropic({ apiKey: token, baseURL, maxRetries: 0 });
  await assert.rejects(client.messages.create(params('hi', { model: 'claude-nonexistent-9' })), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError, `want NotFoundError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 404);
    assert.match(e.requestID ?? '', /^req_/);
    assert.doesNotMatch(e.requestID, /^req_sluice/, 'the API\'s request id, not the proxy\'s');
    return true;
  });
  await assert.rejects(client.messages.create(params('hi', { max_tokens: -1 })), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, `want BadRequestError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.error?.error?.type, 'invalid_request_error');
    return true;
  });
});

test('the proxy token: AuthenticationError without it', { timeout: 20_000 }, async () => {
  const wrong = new Anthropic({ apiKey: wrongKey, baseURL, maxRetries: 0 });
  await assert.rejects(wrong.messages.create(params('let me in')), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, `want AuthenticationError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 401);
    return true;
  });
  const right = new Anthropic({ apiKey: token, baseURL, maxRetries: 0 });
  const msg = await right.messages.create(params('let me in'));
  assert.ok(textOf(msg).startsWith('sim-'));
});

test('no capacity within the wait limit: RateLimitError with retry-after', { timeout: 30_000 }, async () => {
  const client = new Anthropic({ apiKey: token, baseURL: slowURL, maxRetries: 0 });
  const first = client.messages.create(params('slow, holds the only slot', { max_tokens: 16 }));
  // Wait until the first call is in flight on the proxy's lane.
  for (;;) {
    const metrics = await (await fetch(new URL('/metrics', slowURL), { headers: { 'x-api-key': token } })).text();
    const inFlight = metrics
      .split('\n')
      .filter((l) => l.startsWith('sluice_lane_in_flight{'))
      .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
    if (inFlight > 0) break;
    await sleep(5);
  }
  await assert.rejects(client.messages.create(params('waits too long', { max_tokens: 16 })), (e) => {
    assert.ok(e instanceof Anthropic.RateLimitError, `want RateLimitError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 429);
    assert.equal(e.error?.error?.type, 'rate_limit_error');
    assert.ok(Number(e.headers.get('retry-after')) > 0, 'retry-after');
    assert.match(e.requestID ?? '', /^req_/);
    return true;
  });
  const msg = await first;
  assert.ok(textOf(msg).startsWith('sim-'));
});
