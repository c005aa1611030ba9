// The dashboard's browser test: node dashboard.mjs <server url> <api key>
//
// Playwright (playwright-core: no browser download) drives Debian's headless Chromium through
// the dashboard the way a person would: sign in, create and edit a preset with a prompt preview,
// open a session, watch an answer stream in after a tool call, answer approvals, reload the page
// mid-turn, cut the network mid-turn, cancel a running tool, filter the timeline, fork, read the
// turns and the history, and use a phone-sized viewport. On every view it checks that each control
// has an accessible name and is reached by Tab with no trap; it creates a preset with the
// keyboard alone, and runs a run_code program whose card nests its sub-calls. A turn parks on a
// client-executed tool's call (E6) and is answered through the card's form, when the server can. A page of another
// origin follows the session with a stream token (DSHD_CORS_PAGE, listed in the server's
// DSHD_CORS_ORIGINS) and one of an unlisted origin is refused (DSHD_CORS_UNLISTED_PAGE). Every
// step leaves a screenshot in DSHD_ARTIFACTS (default ./artifacts); the page may log no console
// error.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [url, apiKey] = process.argv.slice(2);
if (!url || !apiKey) {
  console.error('usage: node dashboard.mjs <server url> <api key>');
  process.exit(2);
}
// Node's own calls go to the server directly (DSHD_API_DIRECT), not through the cut proxy.
const direct = process.env.DSHD_API_DIRECT || url;
const cutURL = process.env.DSHD_CUT;
const artifacts = process.env.DSHD_ARTIFACTS || new URL('./artifacts', import.meta.url).pathname;
mkdirSync(artifacts, { recursive: true });
const started = Date.now();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(20000);

// Console errors of the dashboard fail the test; while the network is cut on purpose, the
// browser's own "net::ERR_INTERNET_DISCONNECTED" for a request in flight is expected.
const consoleErrors = [];
const NETWORK_ERRORS = /ERR_INTERNET_DISCONNECTED|ERR_NETWORK_CHANGED|ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_EMPTY_RESPONSE|ERR_CONNECTION_RESET|ERR_CONNECTION_CLOSED/;
let offlineWindow = null;
let refusedSignIns = 0; // the browser logs each refused sign-in's 401; the test makes one on purpose
page.on('console', (m) => {
  if (m.type() !== 'error') return;
  const expected = offlineWindow && NETWORK_ERRORS.test(m.text()) &&
    Date.now() >= offlineWindow[0] && Date.now() <= (offlineWindow[1] ?? Infinity);
  if (refusedSignIns > 0 && m.text().includes('status of 401')) {
    refusedSignIns--;
    console.log(`  (expected of the wrong key at sign-in) ${m.text()}`);
  } else if (expected) console.log(`  (expected while the network is cut) ${m.text()}`);
  else consoleErrors.push(m.text());
});
page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));

let shotN = 0;
async function shot(name, p = page, fullPage = true) {
  const file = join(artifacts, `${String(++shotN).padStart(2, '0')}-${name}.png`);
  await p.screenshot({ path: file, fullPage });
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    await shot(`FAILED-${name}`).catch(() => {});
    throw new Error(`step "${name}": ${e.stack || e}`);
  }
  await shot(name);
  console.log(`ok ${name} (${Date.now() - t0} ms)`);
}

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function until(what, fn, timeout = 20000) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function apiCall(method, path, body) {
  const resp = await fetch(direct + path, { method, headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const turn = (n) => page.locator(`section.turn[data-turn="${n}"]`);
const turnStatus = (n) => turn(n).getAttribute('data-status', { timeout: 1000 }).catch(() => null);
async function turnEnded(n, status, timeout = 20000) {
  await until(`turn ${n} to end ${status}`, async () => {
    const got = await turnStatus(n);
    if (got && got !== status) throw new Error(`turn ${n} ended ${got}`);
    return got === status;
  }, timeout);
}
const answer = (n) => turn(n).locator('.msg.assistant').last();

async function send(text) {
  const box = page.getByLabel('Message', { exact: true });
  await box.fill(text);
  await box.press('Control+Enter'); // the keyboard path
  await until('the composer to clear', async () => (await box.inputValue()) === '');
}

// The timeline has one row per event, seqs 0..last, none twice.
async function timelineIsExact() {
  const seqs = await page.locator('table.timeline tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.dataset.seq)));
  check(seqs.length > 0, 'the timeline is empty');
  seqs.forEach((s, i) => check(s === i, `timeline row ${i} has seq ${s}: ${seqs.join(',')}`));
  return seqs.length;
}

// ----- accessibility: names and the keyboard

// The roles of controls that must have an accessible name.
const CONTROL_ROLES = new Set(['button', 'checkbox', 'combobox', 'textbox', 'searchbox', 'spinbutton', 'radio', 'switch',
  'slider', 'listbox', 'tab', 'link', 'menuitem', 'DisclosureTriangle']);

// unnamedControls asks Chromium's accessibility tree (the names a screen reader announces) for
// every control of the page without a name, and checks the DOM the same way: every visible
// input, select, textarea and button has a label, an aria-label(ledby) or (a button) its text.
async function unnamedControls() {
  const cdp = await context.newCDPSession(page);
  const out = [];
  let controls = 0;
  try {
    const { nodes } = await cdp.send('Accessibility.getFullAXTree');
    for (const n of nodes) {
      if (n.ignored || !CONTROL_ROLES.has(n.role?.value)) continue;
      controls++;
      if ((n.name?.value || '').trim()) continue;
      let what = `role ${n.role.value}`;
      if (n.backendDOMNodeId) {
        const { node } = await cdp.send('DOM.describeNode', { backendNodeId: n.backendDOMNodeId }).catch(() => ({}));
        if (node) what += ` <${node.localName} ${(node.attributes || []).join(' ')}>`;
      }
      out.push(what);
    }
  } finally {
    await cdp.detach().catch(() => {});
  }
  out.push(...await page.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((el) => el.checkVisibility() && el.type !== 'hidden')
    .filter((el) => {
      const byId = (el.getAttribute('aria-labelledby') || '').split(/\s+/).filter(Boolean)
        .map((id) => document.getElementById(id)?.textContent.trim()).join('');
      const labels = [...(el.labels || [])].map((l) => l.textContent.trim()).join('');
      const own = el.tagName === 'BUTTON' ? el.textContent.trim() : '';
      return !(byId || labels || (el.getAttribute('aria-label') || '').trim() || own);
    })
    .map((el) => `DOM ${el.outerHTML.slice(0, 160)}`)));
  return { unnamed: out, controls };
}

// focusables lists the visible controls in the page's Tab order (tabindex -1 and disabled ones
// are left out), as short descriptions.
async function focusables() {
  return page.evaluate(() => [...document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]')]
    .filter((el) => el.checkVisibility() && !el.disabled && el.tabIndex >= 0 && el.type !== 'hidden')
    .map((el) => el.dataset.a11y || (el.dataset.a11y = `${el.tagName.toLowerCase()}#${Math.random().toString(36).slice(2, 8)}`)));
}

// focused describes the focused element (as focusables names it), or 'body'.
const focused = () => page.evaluate(() => {
  const el = document.activeElement;
  if (!el || el === document.body) return 'body';
  return el.dataset.a11y || (el.dataset.a11y = `${el.tagName.toLowerCase()}#${Math.random().toString(36).slice(2, 8)}`);
});

// tabCycle presses Tab from the top of the page until focus comes back where it started: every
// visible control must be reached, and no Tab may leave focus where it was (a keyboard trap).
async function tabCycle(view) {
  const want = await focusables();
  await page.evaluate(() => { document.activeElement?.blur(); window.getSelection()?.removeAllRanges(); });
  await page.locator('body').evaluate((b) => b.focus());
  const seen = [];
  let prev = await focused();
  for (let i = 0; i < want.length * 2 + 10; i++) {
    await page.keyboard.press('Tab');
    const now = await focused();
    check(now !== prev || now === 'body', `${view}: Tab left focus on ${now} (a keyboard trap)`);
    if (now !== 'body' && now === seen[0]) break;
    if (now !== 'body') seen.push(now);
    prev = now;
  }
  const missed = want.filter((w) => !seen.includes(w));
  check(missed.length === 0, `${view}: Tab never reached ${missed.length} of ${want.length} controls: ${missed.join(', ')}`);
  check(seen.length > 0, `${view}: Tab reached nothing`);
  // Shift+Tab walks the same controls back.
  const k = Math.min(5, seen.length - 1);
  await page.locator(`[data-a11y="${seen[k]}"]`).focus();
  const back = [];
  for (let i = 0; i < k; i++) {
    await page.keyboard.press('Shift+Tab');
    back.push(await focused());
  }
  const expected = seen.slice(0, k).reverse();
  check(back.join() === expected.join(), `${view}: Shift+Tab went ${back} after Tab went ${seen.slice(0, k + 1)}`);
}

// a11y checks a view: every control named, every control reachable by Tab, and no trap.
async function a11y(view, { tab = true } = {}) {
  const { unnamed, controls } = await unnamedControls();
  check(controls > 0, `${view}: the accessibility tree has no controls`);
  check(unnamed.length === 0, `${view}: controls without an accessible name:\n  ${unnamed.join('\n  ')}`);
  if (tab) await tabCycle(view);
  console.log(`  ${view}: all ${controls} controls are named${tab ? ' and reached by Tab' : ''}`);
}

// tabTo presses Tab (Shift+Tab when back) until the locator's element has focus: the way a
// keyboard user reaches a field. It fails if the element is not reached within max presses.
async function tabTo(locator, { back = false, max = 40 } = {}) {
  for (let i = 0; i < max; i++) {
    if (await locator.evaluate((el) => el === document.activeElement)) return;
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
  }
  throw new Error(`Tab did not reach ${locator} in ${max} presses (focus on ${await focused()})`);
}

// typeInto replaces the focused field's text by typing, as a person would.
async function typeInto(text) {
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.type(text);
}

let sessionId;

await step('sign-in', async () => {
  await page.goto(url);
  const key = page.getByLabel('API key');
  await key.waitFor();
  await shot('sign-in-form');
  await a11y('sign-in');
  check(!(await page.getByRole('button', { name: 'Sign out' }).isVisible()), 'the navigation shows before sign-in');
  // A wrong key is said so, and the form stays.
  await key.fill('dshd_not-a-key');
  refusedSignIns = 1;
  await key.press('Enter');
  await until('the refusal to show', async () => (await page.locator('#alert').innerText().catch(() => '')).includes('refused'));
  check(await key.getAttribute('aria-invalid') === 'true', 'the refused key is not marked invalid');
  await shot('sign-in-refused');
  await key.fill(apiKey);
  await key.press('Enter');
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
});

await step('preset-created', async () => {
  await page.getByRole('link', { name: 'Presets' }).click();
  await page.getByRole('heading', { name: 'Presets' }).waitFor();
  await a11y('presets list');
  await page.getByRole('link', { name: 'New preset' }).click();
  await page.getByLabel('echo', { exact: true }).waitFor(); // the tool catalogue is in
  await a11y('preset editor');
  await page.getByLabel('Name', { exact: true }).fill('browser-test');
  await page.getByLabel('Provider').selectOption('scripted');
  await page.getByLabel('Model', { exact: true }).fill('default');
  await page.getByLabel('Persona').fill('You are the browser test.');
  await page.getByRole('button', { name: 'Add section' }).click();
  await page.getByLabel('Section name').fill('style');
  await page.getByLabel('Section text').fill('Be brief, {{team}}.');
  await page.getByRole('button', { name: 'Add variable' }).click();
  await page.getByLabel('Variable name').fill('team');
  await page.getByLabel('Value', { exact: true }).fill('web');
  await page.getByLabel('echo', { exact: true }).check();
  await page.getByLabel('sleep', { exact: true }).check();
  await page.getByLabel('Policies (JSON)').fill(JSON.stringify({ approval: { policy: 'ask', ask: ['echo'], timeoutMs: 120000 }, limits: { maxSteps: 20 } }));
  await a11y('preset editor with a section and a variable');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Edit preset browser-test (version 1)' }).waitFor();
});

await step('preset-preview', async () => {
  await page.getByRole('button', { name: 'Preview prompt' }).click();
  const system = page.locator('.preview-system');
  await system.waitFor();
  const text = await system.innerText();
  check(text.includes('You are the browser test.') && text.includes('Be brief'), `system prompt: ${text}`);
  const tools = await page.locator('.preview details summary').allInnerTexts();
  check(tools.some((t) => t.startsWith('echo')) && tools.some((t) => t.startsWith('sleep')) && tools.length === 2, `tools ${tools}`);
  // PUT replaces the whole preset: a second version keeps every field.
  await page.getByLabel('Persona').fill('You are the browser test, version two.');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('heading', { name: 'Edit preset browser-test (version 2)' }).waitFor();
  check(await page.getByLabel('echo', { exact: true }).isChecked(), 'echo lost its check');
  const pol = JSON.parse(await page.getByLabel('Policies (JSON)').inputValue());
  check(pol.approval.ask[0] === 'echo' && pol.limits.maxSteps === 20, `policies ${JSON.stringify(pol)}`);
});

await step('preset-from-the-keyboard', async () => {
  // Only the keyboard: Tab and Shift+Tab to the fields, typing, Space on check boxes, Enter on
  // buttons and links.
  await tabTo(page.getByRole('link', { name: 'Presets' }), { back: true, max: 80 });
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Presets' }).waitFor();
  await tabTo(page.getByRole('link', { name: 'New preset' }));
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'New preset' }).waitFor();
  await page.getByLabel('echo', { exact: true }).waitFor();
  const name = page.getByLabel('Name', { exact: true });
  check(await name.evaluate((el) => el === document.activeElement), 'the new preset form does not start at its name');
  await page.keyboard.type('keyboard-preset');
  await tabTo(page.getByLabel('Provider'));
  await page.keyboard.type('scripted'); // a closed select picks the option whose text is typed
  await tabTo(page.getByLabel('Model', { exact: true }));
  await typeInto('default');
  await tabTo(page.getByLabel('Mode', { exact: true }));
  await page.keyboard.type('code');
  for (const tool of ['echo', 'wait']) {
    await tabTo(page.getByLabel(tool, { exact: true }));
    await page.keyboard.press('Space');
  }
  await tabTo(page.getByLabel('Persona'));
  await page.keyboard.type('You are typed from the keyboard.');
  await tabTo(page.getByRole('button', { name: 'Add section' }));
  await page.keyboard.press('Enter');
  // The new row's first field has focus; its fields follow in Tab order.
  const sectionName = page.getByLabel('Section name');
  check(await sectionName.evaluate((el) => el === document.activeElement), `Add section left focus on ${await focused()}`);
  await page.keyboard.type('style');
  await tabTo(page.getByLabel('Section text'));
  await page.keyboard.type('Answer {{who}}.');
  // A removed row hands focus back to its Add button, not to the page.
  await tabTo(page.getByRole('button', { name: 'Add section' }));
  await page.keyboard.press('Enter');
  await tabTo(page.getByRole('button', { name: 'Remove section' }).nth(1));
  await page.keyboard.press('Space');
  check(await page.getByRole('button', { name: 'Add section' }).evaluate((el) => el === document.activeElement), `Remove section left focus on ${await focused()}`);
  check(await page.getByLabel('Section name').count() === 1, 'the second section was not removed');
  // Back to the first section's Complete box with Shift+Tab, on and off again.
  const complete = page.getByLabel('Complete (replaces the assembled prompt)');
  await tabTo(complete, { back: true });
  await page.keyboard.press('Space');
  check(await complete.isChecked(), 'Space did not check Complete');
  await page.keyboard.press('Space');
  check(!(await complete.isChecked()), 'Space did not uncheck Complete');
  await tabTo(page.getByRole('button', { name: 'Add variable' }));
  await page.keyboard.press('Enter');
  check(await page.getByLabel('Variable name').evaluate((el) => el === document.activeElement), `Add variable left focus on ${await focused()}`);
  await page.keyboard.type('who');
  await tabTo(page.getByLabel('Value', { exact: true }));
  await page.keyboard.type('briefly');
  await tabTo(page.getByLabel('Policies (JSON)'));
  await typeInto('{"limits":{"maxSteps":7}}');
  await a11y('preset editor filled from the keyboard');
  await tabTo(page.getByLabel('Policies (JSON)'));
  await tabTo(page.getByRole('button', { name: 'Save' }));
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Edit preset keyboard-preset (version 1)' }).waitFor();
  const list = await apiCall('GET', '/v1/presets?limit=500');
  const p = list.items.find((x) => x.name === 'keyboard-preset');
  check(p && p.model.provider === 'scripted' && p.model.model === 'default' && p.tools.mode === 'code' &&
    JSON.stringify(p.tools.allow) === '["echo","wait"]' && p.prompt.persona === 'You are typed from the keyboard.' &&
    p.prompt.sections.length === 1 && p.prompt.sections[0].name === 'style' && p.prompt.sections[0].text === 'Answer {{who}}.' &&
    !p.prompt.sections[0].complete && p.prompt.variables.who === 'briefly' && p.limits.maxSteps === 7,
  `the preset typed from the keyboard: ${JSON.stringify(p)}`);
});

await step('session-opened', async () => {
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.locator('table.sessions').waitFor();
  await a11y('sessions list');
  await page.getByLabel('Preset').selectOption({ label: 'browser-test (v2)' });
  await page.getByRole('button', { name: 'New session' }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  sessionId = page.url().split('/').pop();
  await until('the stream to be live', async () => (await page.locator('#conn').innerText()) === 'live');
});

await step('tool-card-and-streamed-answer', async () => {
  await send('tool:sleep args:{"ms":200,"text":"slept"} say:one%20two%20three%20four%20five%20six chunks:6 chunkdelay:250');
  const card = turn(1).locator('article.tool', { hasText: 'sleep' });
  await until('the sleep card to succeed', async () => (await card.locator('.badge.ok').count()) === 1);
  check((await card.locator('.result').innerText()).includes('slept'), 'the sleep card lacks its result');
  check(/\d+ ms/.test(await card.locator('.timing').innerText()), 'the card has no timing');
  check((await card.locator('.args').innerText()).includes('"ms": 200'), 'the card lacks its arguments');
  const final = 'one two three four five six';
  const partials = new Set();
  await until('the answer to stream', async () => {
    const text = await answer(1).innerText().catch(() => '');
    if (text && text !== final) partials.add(text);
    return text === final;
  });
  check(partials.size >= 2, `the answer did not stream: ${[...partials]}`);
  await turnEnded(1, 'completed');
});

await step('approval-asked', async () => {
  await send('tool:echo args:{"text":"hi"}');
  await page.getByRole('group', { name: 'Approval for echo' }).waitFor();
  // The card shows its call's arguments (from the call's event, or the pending approvals list).
  await page.getByRole('group', { name: 'Approval for echo' }).locator('pre', { hasText: '"text": "hi"' }).waitFor()
    .catch(() => { throw new Error('approval lacks arguments'); });
  // While the turn holds the session no fork can be made: the header's Fork is disabled.
  check(await page.locator('.session-head').getByRole('button', { name: 'Fork' }).isDisabled(), 'Fork is offered while a turn holds the session');
  await page.getByRole('tab', { name: 'Timeline' }).click();
  const offered = page.locator('table.timeline tbody button.fork');
  check(await offered.count() > 0 && await offered.evaluateAll((bs) => bs.every((b) => b.disabled)), 'the timeline offers a Fork while a turn holds the session');
  await page.getByRole('tab', { name: 'Chat' }).click();
});

await step('approval-allowed', async () => {
  await page.getByRole('button', { name: 'Allow once' }).click();
  const card = turn(2).locator('article.tool', { hasText: 'echo' });
  await until('the echo card to succeed', async () => (await card.locator('.badge.ok').count()) >= 1 && (await card.locator('.result').innerText()) === 'hi');
  await turnEnded(2, 'completed');
});

await step('approval-rejected', async () => {
  await send('tool:echo args:{"text":"no"}');
  await turn(3).getByRole('button', { name: 'Reject' }).click();
  await until('the rejected code', async () => (await turn(3).locator('.error-code').innerText().catch(() => '')).includes('APPROVAL_REJECTED'));
  await turnEnded(3, 'completed');
});

await step('reloaded-mid-turn', async () => {
  await send('say:a%20b%20c%20d%20e%20f%20g%20h%20i%20j chunks:10 chunkdelay:300');
  await until('part of the answer', async () => (await answer(4).innerText().catch(() => '')).length > 0);
  const before = [];
  for (const n of [1, 2, 3]) before.push(await turn(n).innerText());
  const toolCards = await page.locator('article.tool').count();
  const partial = await answer(4).innerText();
  await page.reload();
  await page.locator('section.turn[data-turn="4"]').waitFor();
  // The turn that was streaming comes back with at least what was shown, then goes on.
  await until('the streaming answer to be back', async () => (await answer(4).innerText().catch(() => '')).length >= partial.length);
  const resumed = await answer(4).innerText();
  check(resumed.startsWith(partial), `the streaming answer after the reload:\n${resumed}\nbefore:\n${partial}`);
  for (const [i, n] of [1, 2, 3].entries()) {
    const after = await turn(n).innerText();
    check(after === before[i], `turn ${n} after the reload:\n${after}\nbefore:\n${before[i]}`);
  }
  check(await page.locator('article.tool').count() === toolCards, 'tool cards differ after the reload');
  await until('the answer to finish after the reload', async () => (await answer(4).innerText()) === 'a b c d e f g h i j');
  await turnEnded(4, 'completed');
});

await step('network-cut-mid-turn', async () => {
  await send('say:k%20l%20m%20n%20o%20p%20q%20r%20s%20t%20u%20v chunks:12 chunkdelay:300');
  await until('part of the answer', async () => (await answer(5).innerText().catch(() => '')).length > 0);
  offlineWindow = [Date.now()];
  await context.setOffline(true);
  await page.waitForTimeout(1500);
  await shot('offline');
  await context.setOffline(false);
  offlineWindow[1] = Date.now() + 2000;
  await until('the answer to finish after the cut', async () => (await answer(5).innerText()) === 'k l m n o p q r s t u v');
  await turnEnded(5, 'completed');
  await until('the stream to be live again', async () => (await page.locator('#conn').innerText()) === 'live');
  await page.getByRole('tab', { name: 'Timeline' }).click();
  const n = await timelineIsExact();
  const stored = await apiCall('GET', `/v1/sessions/${sessionId}/events?limit=1000`);
  check(stored.events.length === n, `timeline has ${n} events, the log ${stored.events.length}`);
  await page.getByRole('tab', { name: 'Chat' }).click();
});

if (cutURL) {
  await step('connection-cut-mid-turn', async () => {
    // The connections drop under the page: the EventSource reconnects by itself with
    // Last-Event-ID, and nothing shows twice.
    await send('say:w%20x%20y%20z%20aa%20bb%20cc%20dd chunks:8 chunkdelay:400');
    await until('part of the answer', async () => (await answer(6).innerText().catch(() => '')).length > 0);
    offlineWindow = [Date.now()];
    const r = await fetch(cutURL, { method: 'POST' });
    console.log(`  ${(await r.text()).trim()}`);
    await until('the answer to finish after the cut', async () => (await answer(6).innerText()) === 'w x y z aa bb cc dd', 30000);
    offlineWindow[1] = Date.now() + 2000;
    await turnEnded(6, 'completed');
    await page.getByRole('tab', { name: 'Timeline' }).click();
    await timelineIsExact();
    await page.getByRole('tab', { name: 'Chat' }).click();
  });
}

await step('cancelled', async () => {
  await send('tool:sleep args:{"ms":60000}');
  await until('the sleep to run', async () => (await turn(7).locator('article.tool .badge.running').count()) === 1 &&
    (await page.locator('.session-head .status').innerText()).includes('running'));
  await page.getByRole('button', { name: 'Cancel turn' }).click();
  await turnEnded(7, 'cancelled');
  await until('the aborted card', async () => (await turn(7).locator('.error-code').innerText()).includes('ABORTED'));
  await until('the session to be idle', async () => (await page.locator('.session-head .status').innerText()).includes('idle'));
});

await step('timeline-filtered', async () => {
  await page.getByRole('tab', { name: 'Timeline' }).click();
  await page.getByLabel('Types').fill('tool/call');
  const types = await page.locator('table.timeline tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.type));
  const calls = (await apiCall('GET', `/v1/sessions/${sessionId}/events?types=tool/call`)).events.length;
  check(calls === 4 && types.length === calls && types.every((t) => t === 'tool/call'), `filtered types ${types}, ${calls} calls`);
  await page.getByLabel('Types').fill('turn/');
  await page.getByLabel('From seq').fill('10');
  const rows = await page.locator('table.timeline tbody tr').evaluateAll((rs) => rs.map((r) => [Number(r.dataset.seq), r.dataset.type]));
  check(rows.length > 0 && rows.every(([s, t]) => s >= 10 && t.startsWith('turn/')), `filtered ${JSON.stringify(rows)}`);
  await page.getByLabel('From seq').fill('');
  await page.getByLabel('Types').fill('');
  await timelineIsExact();
});

await step('turns-and-history', async () => {
  await page.getByRole('tab', { name: 'Turns' }).click();
  const want = `${'completed,'.repeat(cutURL ? 6 : 5)}cancelled`;
  await until('the turns', async () => (await page.locator('table.turns tbody tr').count()) === want.split(',').length);
  const statuses = await page.locator('table.turns tbody tr td:nth-child(2)').allInnerTexts();
  check(statuses.join(',') === want, `turn statuses ${statuses}`);
  await page.getByRole('tab', { name: 'History' }).click();
  await until('the history', async () => (await page.locator('.history-msg').count()) > 6);
  await page.getByRole('tab', { name: 'Prompt' }).click();
  await until('the prompt', async () => (await page.locator('[role=tabpanel]:not([hidden]) pre').first().innerText()).includes('version two'));
});

await step('forked', async () => {
  await page.getByRole('tab', { name: 'Timeline' }).click();
  // Fork is offered exactly at the events a fork may end at: outside an open turn (SES-15).
  const rows = page.locator('table.timeline tbody tr');
  const offered = await rows.evaluateAll((trs) => trs.filter((tr) => tr.querySelector('button')).map((tr) => Number(tr.dataset.seq)));
  const all = await rows.evaluateAll((trs) => trs.map((tr) => ({ seq: Number(tr.dataset.seq), type: tr.dataset.type })));
  let open = false;
  const allowed = [];
  for (const r of all) {
    if (r.type === 'turn/start') open = true;
    if (r.type === 'turn/end') open = false;
    if (!open) allowed.push(r.seq);
  }
  check(offered.join() === allowed.join(), `Fork offered at ${offered}, want ${allowed}`);
  check(offered.length < all.length / 4, `Fork offered at ${offered.length} of ${all.length} events`);
  // The run lease may outlive the turn/end a little: the header's Fork is enabled once it is gone.
  await until('the idle session to offer Fork', async () => !(await page.locator('.session-head').getByRole('button', { name: 'Fork' }).isDisabled()));
  check(!(await rows.locator('button.fork').first().isDisabled()), 'the timeline\'s Fork is disabled in an idle session');
  // Fork after turn 2's end: the child has turns 1 and 2.
  const turnEnds = page.locator('table.timeline tbody tr[data-type="turn/end"]');
  const seq = await turnEnds.nth(1).getAttribute('data-seq');
  await turnEnds.nth(1).getByRole('button').click();
  await page.waitForURL((u) => !u.href.endsWith(sessionId));
  await page.getByRole('link', { name: /fork of/ }).waitFor();
  await turnEnded(2, 'completed');
  check(await page.locator('section.turn').count() === 2, 'the fork has other turns than 1 and 2');
  const child = page.url().split('/').pop();
  const s = await apiCall('GET', `/v1/sessions/${child}`);
  check(s.parentSession === sessionId && s.seedLength === Number(seq) + 1, `fork ${JSON.stringify(s)}`);
  await page.goBack();
  await page.locator('section.turn[data-turn="7"]').waitFor();
});

await step('keyboard-and-labels', async () => {
  // Every control of every tab of the session view has a name; Tab reaches every control of the
  // chat with no trap; tabs move with the arrow keys.
  for (const name of ['Timeline', 'Turns', 'History', 'Prompt', 'Chat']) {
    await page.getByRole('tab', { name }).click();
    await a11y(`session view, ${name} tab`, { tab: name === 'Chat' });
  }
  await page.getByRole('tab', { name: 'Chat' }).focus();
  await page.keyboard.press('ArrowRight');
  check(await page.getByRole('tab', { name: 'Timeline' }).getAttribute('aria-selected') === 'true', 'ArrowRight did not select the next tab');
  await page.keyboard.press('ArrowLeft');
});

await step('phone-viewport', async () => {
  await page.setViewportSize({ width: 375, height: 740 });
  await page.getByRole('tab', { name: 'Chat' }).click();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `the session view is ${overflow}px wider than the phone`);
  check(await page.getByLabel('Message', { exact: true }).isVisible(), 'no composer on the phone');
  await shot('phone-session', page, false);
  await page.getByRole('tab', { name: 'Timeline' }).click();
  const overflowT = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflowT <= 0, `the timeline is ${overflowT}px wider than the phone`);
  await shot('phone-timeline', page, false);
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.locator('table.sessions tbody tr').first().waitFor();
  const overflow2 = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow2 <= 0, `the session list is ${overflow2}px wider than the phone`);
  const status = await page.locator(`table.sessions tr[data-id="${sessionId}"] .badge`).innerText();
  check(status === 'idle', `listed status ${status}`);
  // The list refreshes itself; a keyboard user's focus on a row's link stays there.
  const link = page.locator(`table.sessions tr[data-id="${sessionId}"] a`);
  await tabTo(link, { max: 80 });
  const list = page.locator('table.sessions tbody');
  const loads = Number(await list.getAttribute('data-loads'));
  await until('the list to refresh', async () => Number(await list.getAttribute('data-loads')) > loads);
  check(await link.evaluate((el) => el === document.activeElement), `the list's refresh moved focus to ${await focused()}`);
});
await page.setViewportSize({ width: 1280, height: 900 });

const corsPage = process.env.DSHD_CORS_PAGE;
if (corsPage) {
  await step('another-origin-follows-with-a-token', async () => {
    const tok = await apiCall('POST', `/v1/sessions/${sessionId}/stream-tokens`);
    const other = await context.newPage();
    const otherErrors = [];
    other.on('console', (m) => { if (m.type() === 'error') otherErrors.push(m.text()); });
    await other.goto(`${corsPage}/?api=${encodeURIComponent(url)}&session=${sessionId}&token=${encodeURIComponent(tok.token)}`);
    const seen = () => other.evaluate(() => window.seen);
    const last = (await apiCall('GET', `/v1/sessions/${sessionId}`)).lastSeq;
    await until('the backfill', async () => (await seen()).length === last + 1);
    await apiCall('POST', `/v1/sessions/${sessionId}/messages`, { content: 'text' });
    await until('turn 8 live', async () => (await apiCall('GET', `/v1/sessions/${sessionId}/turns/8`).catch(() => ({}))).endedAt &&
      (await seen()).length === (await apiCall('GET', `/v1/sessions/${sessionId}`)).lastSeq + 1);
    // A cut: the EventSource reconnects with Last-Event-ID (a preflighted header) and resumes.
    check(await other.evaluate(() => window.opens) === 1, 'the stream opened more than once');
    if (cutURL) {
      offlineWindow = [Date.now()];
      await fetch(cutURL, { method: 'POST' });
      await until('the reconnect', async () => (await other.evaluate(() => window.opens)) === 2, 30000);
      offlineWindow[1] = Date.now() + 2000;
    }
    await apiCall('POST', `/v1/sessions/${sessionId}/messages`, { content: 'text' });
    await until('turn 9 after the cut', async () => {
      const s = await apiCall('GET', `/v1/sessions/${sessionId}`);
      const got = await seen();
      return s.status === 'idle' && s.lastTurn === 9 && got.length >= s.lastSeq + 1 && got.at(-1) === s.lastSeq;
    }, 30000);
    const got = await seen();
    // EventSource resumes after the last id it saw; a seq can repeat only if the server resent it.
    check(new Set(got).size === got.length && got.every((s, i) => s === i), `seqs on the other origin: ${got}`);
    await shot('other-origin', other);
    check(otherErrors.every((e) => NETWORK_ERRORS.test(e)), `console errors on the other origin: ${otherErrors}`);
    await other.close();
  });
}

if (corsPage) {
  await step('another-origin-acts-with-an-action-token', async () => {
    // A page of another origin holds no API key: the backend (here the test) mints it a token
    // that can post, approve and cancel in one session, and the page runs the chat with it alone.
    const preset = await apiCall('POST', '/v1/presets', { name: 'page-chat', model: { provider: 'scripted', model: 'default' },
      approval: { policy: 'ask', ask: ['echo'], timeoutMs: 120000 } });
    const s = await apiCall('POST', '/v1/sessions', { presetId: preset.id });
    const tok = await apiCall('POST', `/v1/sessions/${s.id}/action-tokens`, { scopes: ['post', 'approve', 'cancel'] });
    const other = await context.newPage();
    const otherErrors = [];
    other.on('console', (m) => { if (m.type() === 'error') otherErrors.push(m.text()); });
    await other.goto(`${corsPage}/chat?api=${encodeURIComponent(url)}&session=${s.id}&token=${encodeURIComponent(tok.token)}`);
    await until('the page to run its chat', async () => other.evaluate(() => window.done || window.failure !== null), 60000);
    const failure = await other.evaluate(() => window.failure);
    check(failure === null, `the page failed: ${failure}`);
    const ends = await other.evaluate(() => window.ends);
    check(ends.join() === 'completed,aborted', `the page's turns ended ${ends}`);
    const listStatus = await other.evaluate(() => window.listStatus);
    check(listStatus === 403, `the token listed the tenant's sessions: ${listStatus}`);
    // The log agrees: the approval asked and allowed, the tool ran, the second turn cancelled.
    const evs = (await apiCall('GET', `/v1/sessions/${s.id}/events?limit=1000`)).events;
    const decided = evs.find((e) => e.type === 'approval/decided');
    check(decided && decided.data.outcome === 'allowed-once', `approval ${JSON.stringify(decided)}`);
    const ran = evs.find((e) => e.type === 'tool/result');
    check(ran && ran.data.message.content[0].isError !== true, `the approved echo did not run: ${JSON.stringify(ran)}`);
    const cancel = evs.find((e) => e.type === 'agent/cancel');
    check(cancel && cancel.data.reason.kind === 'user', `cancel ${JSON.stringify(cancel)}`);
    const shown = await other.locator('#log li').count();
    check(shown === evs.length, `the page showed ${shown} events of ${evs.length}`);
    await shot('other-origin-chat', other);
    // The one error the page's console shows is the refused listing's.
    check(otherErrors.length === 1 && otherErrors[0].includes('403'), `console errors on the chat page: ${otherErrors}`);
    await other.close();
  });
}

const unlistedPage = process.env.DSHD_CORS_UNLISTED_PAGE;
if (unlistedPage) {
  await step('unlisted-origin-refused', async () => {
    const tok = await apiCall('POST', `/v1/sessions/${sessionId}/stream-tokens`);
    const other = await context.newPage();
    const corsErrors = [];
    other.on('console', (m) => { if (m.type() === 'error') corsErrors.push(m.text()); });
    await other.goto(`${unlistedPage}/?api=${encodeURIComponent(url)}&session=${sessionId}&token=${encodeURIComponent(tok.token)}`);
    await until('the refusal', async () => corsErrors.some((e) => e.includes('CORS')));
    await other.waitForTimeout(500);
    const seen = await other.evaluate(() => window.seen);
    check(seen.length === 0, `an unlisted origin read ${seen.length} events`);
    await shot('unlisted-origin', other);
    await other.close();
  });
}

await step('run-code-card', async () => {
  // The keyboard-made `code` preset: one run_code program whose two sub-calls nest in its card.
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.getByLabel('Preset').selectOption({ label: 'keyboard-preset (v1)' });
  await page.getByRole('button', { name: 'New session' }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  await until('the stream to be live', async () => (await page.locator('#conn').innerText()) === 'live');
  const program = 'const [a, b] = await Promise.all([tools.echo({text: "x"}), tools.wait({ms: 5000, text: "y"})]);\nreturn a + " " + b;';
  await send(`tool:run_code args:${encodeURIComponent(JSON.stringify({ code: program, description: 'Two calls' }))}`);
  const card = turn(1).locator('article.tool', { hasText: 'run_code' });
  const subs = card.locator('ul.subcalls > li.subcall');
  // The sub-calls show while the program runs, before the outer result.
  await until('both sub-calls in the running card', async () => (await subs.count()) === 2 &&
    (await card.locator('.tool-state .badge.running').count()) === 1);
  // The running card counts its time; the count goes once the result is in.
  await until('the running card to show how long it runs', async () => /^running for [1-9]\d* s$/.test(await card.locator('.tool-head .timing').first().innerText()));
  await until('the program to succeed', async () => (await card.locator('.tool-state .badge.ok').count()) === 1);
  check(/^\d+ ms$/.test(await card.locator('.tool-head .timing').first().innerText()), 'the finished card does not show its duration');
  check((await card.locator('.tool-result .result').innerText()) === 'x y', 'the run_code card lacks its result');
  const names = await subs.locator('.tool-head .mono').allInnerTexts();
  check(names.join() === 'echo,wait', `sub-calls ${names}`);
  check(await subs.locator('.sub-state .badge.ok').count() === 2, 'a sub-call did not succeed');
  check((await subs.nth(1).locator('pre').first().innerText()).includes('"ms": 5000'), 'a sub-call lacks its arguments');
  await turnEnded(1, 'completed');
  await a11y('session view with a run_code card', { tab: false });
});

// A turn parked on a client-executed call (E6): the card says what it waits for, its form posts
// the result (POST .../tool-results), the result shows when its tool/client-result arrives and
// the resumed turn ends. It needs a server whose presets declare client-executed tools
// (tools.declared) and whose post path takes tool results (a result for a call nobody waits for
// answers 404); a server without them is told by its answers, and the step is skipped.
async function rawCall(method, path, body) {
  const resp = await fetch(direct + path, { method, headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return { status: resp.status, body: await resp.json().catch(() => null) };
}
const clientPreset = await rawCall('POST', '/v1/presets', { name: 'client-tool', model: { provider: 'scripted', model: 'default' },
  tools: { declared: [{ name: 'ask_user', description: 'Asks the user a question.', executor: 'client', timeoutMs: 600000,
    parameters: { type: 'object', properties: { question: { type: 'string' } }, required: ['question'] } }] } });
const clientSession = clientPreset.status === 201 ? await rawCall('POST', '/v1/sessions', { presetId: clientPreset.body.id }) : null;
const probe = clientSession?.status === 201
  ? await rawCall('POST', `/v1/sessions/${clientSession.body.id}/tool-results`, { callId: 'nobody-waits', content: 'x' }) : null;
if (probe?.status !== 404) {
  console.log(`skip parked-turn-answered: the server declares no client tools (preset ${clientPreset.status}) or takes no tool results (${probe?.status})`);
} else {
  await step('parked-turn-answered', async () => {
    await page.goto(`${url}/#/sessions/${clientSession.body.id}`);
    await until('the stream to be live', async () => (await page.locator('#conn').innerText()) === 'live');
    await send('tool:ask_user args:{"question":"colour"}');
    await turn(1).getByRole('group', { name: 'Turn 1 parked' }).waitFor();
    await until('the session to wait for the client', async () =>
      (await page.locator('.session-head .status').innerText()).includes('waiting-client'));
    const form = page.getByRole('form', { name: 'Result of ask_user' });
    await form.getByLabel('Content').fill('blue');
    await form.getByRole('button', { name: 'Submit result' }).click();
    const card = turn(1).locator('article.tool', { hasText: 'ask_user' });
    await until('the client result in the card', async () =>
      (await card.locator('.client-result .result').innerText().catch(() => '')) === 'blue');
    await turnEnded(1, 'completed');
    await a11y('session view with a parked turn', { tab: false });
  });
}

await step('signed-out', async () => {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  check(await page.evaluate(() => sessionStorage.length) === 0, 'the key is still stored');
});

await browser.close();
if (consoleErrors.length) {
  console.error(`console errors:\n${consoleErrors.join('\n')}`);
  process.exit(1);
}
console.log(`dashboard test passed in ${((Date.now() - started) / 1000).toFixed(1)} s; ${shotN} screenshots in ${artifacts}`);
