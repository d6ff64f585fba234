// verifyWebhook against the Standard Webhooks reference vector and the
// ways a delivery must be refused (the clock is injected).
import assert from "node:assert/strict";
import { test } from "node:test";

import { WebhookVerificationError, signWebhook, verifyWebhook } from "../dist/index.js";

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const timestamp = 1614265330;
const body = '{"test": 2432232314}';
const signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const at = (seconds) => () => seconds * 1000;
const headers = (sig, ts = String(timestamp), msg = id) => ({
  "webhook-id": msg, "webhook-timestamp": ts, "webhook-signature": sig,
});

test("signWebhook reproduces the spec's vector", async () => {
  assert.equal(await signWebhook(secret, id, timestamp, body), signature);
});

test("verifyWebhook", async (t) => {
  const cases = [
    { name: "SpecVector", h: headers(signature), body, now: timestamp, ok: true },
    { name: "FetchHeaders", h: new Headers(headers(signature)), body, now: timestamp, ok: true },
    { name: "Bytes", h: headers(signature), body: new TextEncoder().encode(body), now: timestamp, ok: true },
    { name: "AmongOthers", h: headers(`v2,x v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= ${signature}`), body, now: timestamp, ok: true },
    { name: "FiveMinutesOff", h: headers(signature), body, now: timestamp + 300, ok: true },
    { name: "BadSignature", h: headers("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="), body, now: timestamp, ok: false },
    { name: "PartialSignature", h: headers("v1,"), body, now: timestamp, ok: false },
    { name: "ReserialisedBody", h: headers(signature), body: '{"test":2432232314}', now: timestamp, ok: false },
    { name: "OtherID", h: headers(signature, String(timestamp), "msg_other"), body, now: timestamp, ok: false },
    { name: "TooOld", h: headers(signature), body, now: timestamp + 301, ok: false },
    { name: "TooNew", h: headers(signature), body, now: timestamp - 301, ok: false },
    { name: "MissingHeaders", h: {}, body, now: timestamp, ok: false },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const run = verifyWebhook(secret, c.h, c.body, { now: at(c.now) });
      if (c.ok) {
        assert.deepEqual(await run, { test: 2432232314 });
      } else {
        await assert.rejects(run, WebhookVerificationError);
      }
    });
  }
});
