// Helpers shared by sim.test.mjs and proxy.test.mjs (not a test file:
// go test runs those two by name).

import assert from 'node:assert/strict';

// env returns a variable the Go test must have set.
export function env(name) {
  const v = process.env[name];
  assert.ok(v, `${name} must be set (this file is run by go test ./sim/sdktest/tssdk)`);
  return v;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// textOf joins a message's text blocks.
export function textOf(message) {
  return message.content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');
}

// paramsFor returns params(prompt, extra): a short Messages request to model.
export function paramsFor(model) {
  return (prompt, extra = {}) => ({ model, max_tokens: 64, messages: [{ role: 'user', content: prompt }], ...extra });
}
