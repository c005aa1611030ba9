// The dashboard's browser test of a parked turn (E6): node parked.mjs <server url> <api key> <session id>
//
// The session's open turn is parked on the client-executed call c1 of tool ask_user (the Go side,
// api's TestE6_DashboardAnswersAParkedTurn, wrote it to the log). Playwright drives Debian's
// headless Chromium: sign in, open the session, see the parked turn and what it waits for, answer
// the call through its form, and see the result replace the form once its tool/client-result
// arrives on the stream. The page may log no console error; screenshots go to DSHD_ARTIFACTS.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [url, apiKey, sessionId] = process.argv.slice(2);
if (!url || !apiKey || !sessionId) {
  console.error('usage: node parked.mjs <server url> <api key> <session id>');
  process.exit(2);
}
const artifacts = process.env.DSHD_ARTIFACTS || new URL('./artifacts', import.meta.url).pathname;
mkdirSync(artifacts, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.setDefaultTimeout(20000);
const errors = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));

async function until(what, fn, timeout = 20000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (await fn().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

try {
  await page.goto(url);
  await page.getByLabel('API key').fill(apiKey);
  await page.getByLabel('API key').press('Enter');
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
  await page.goto(`${url}/#/sessions/${sessionId}`);
  const turn = page.locator('section.turn[data-turn="1"]');
  const parked = turn.getByRole('group', { name: 'Turn 1 parked' });
  await parked.waitFor();
  const said = await parked.innerText();
  if (!said.includes("the client's result of ask_user")) throw new Error(`the parked card says ${said}`);
  await until('the session to wait for the client', async () =>
    (await page.locator('.session-head .status').innerText()).includes('waiting-client'));
  const form = page.getByRole('form', { name: 'Result of ask_user' });
  await form.getByLabel('Content').fill('blue');
  await form.getByLabel('is an error').check();
  await page.screenshot({ path: join(artifacts, 'parked-form.png'), fullPage: true });
  await form.getByRole('button', { name: 'Submit result' }).click();
  const card = turn.locator('article.tool', { hasText: 'ask_user' });
  await until('the client result in the call card', async () =>
    (await card.locator('.client-result .result').innerText()) === 'blue' &&
    (await card.locator('.client-result .badge.error').count()) === 1);
  if (await page.getByRole('form', { name: 'Result of ask_user' }).count() !== 0) throw new Error('the form is still shown');
  await until('the session and its turn to be queued for the resume', async () =>
    (await page.locator('.session-head .status').innerText()).includes('queued') &&
    (await turn.locator('.badge.queued').count()) === 1);
  await page.screenshot({ path: join(artifacts, 'parked-answered.png'), fullPage: true });
} catch (e) {
  await page.screenshot({ path: join(artifacts, 'parked-FAILED.png'), fullPage: true }).catch(() => {});
  console.error(e.stack || String(e));
  await browser.close();
  process.exit(1);
}
await browser.close();
if (errors.length) {
  console.error(`console errors:\n${errors.join('\n')}`);
  process.exit(1);
}
console.log('parked turn answered in the browser');
