// The seat-map page: draws a show's venue from its layout, keeps every seat's state
// current from the show's event stream (a snapshot, then changes), and lets a demo
// holder (its id kept in this browser) hold, confirm and release seats. Plain
// JavaScript, no build step.
'use strict';
(() => {
  const show = decodeURIComponent(location.pathname.replace(/\/+$/, '').split('/').pop());
  const api = '/v1/shows/' + encodeURIComponent(show);
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';

  // The demo holder: with signed holders on, a signed demo identity from the server
  // (kept until it expires); else an id made here, sent as Holder-Id.
  let holder = localStorage.getItem('holdfast-holder');
  let token = null;
  const signed = JSON.parse(localStorage.getItem('holdfast-identity') || 'null');
  if (signed && Date.parse(signed.expires_at) > Date.now() + 60000) {
    holder = signed.holder;
    token = signed.token;
  }
  if (!holder) {
    holder = 'page-' + Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, '0')).join('');
    localStorage.setItem('holdfast-holder', holder);
  }
  const identity = token ? Promise.resolve() : fetch('/v1/demo/identity', { method: 'POST' }).then(async (res) => {
    if (res.status !== 201) return; // signing is off: Holder-Id it is
    const id = await res.json();
    localStorage.setItem('holdfast-identity', JSON.stringify(id));
    holder = id.holder;
    token = id.token;
    $('holder').textContent = holder;
  }).catch(() => {});
  const holdsKey = 'holdfast-holds-' + show;
  let myHolds = JSON.parse(localStorage.getItem(holdsKey) || '[]'); // hold JSON, as the API gave it
  const saveHolds = () => localStorage.setItem(holdsKey, JSON.stringify(myHolds));

  let layout = [];           // seats in layout order
  let states = [];           // one char per seat: f, h, s; '?' until the first snapshot
  const counts = { f: 0, h: 0, s: 0 };
  const index = new Map();   // seat id -> layout index
  let view = null;           // draws the seats: svgView (as elements) or canvasView
  const selected = new Set();// layout indices
  let shownMine = new Set(); // the seats last drawn as mine
  let version = '';
  let connected = false;
  let loaded = false;        // a snapshot has come: until then no seat is drawn free

  // What holdfast bench reads from the page (ms): building the map, drawing a
  // snapshot, each changes event, and the main thread's long tasks.
  const perf = window.holdfastPerf = { view: '', draw: 0, snapshot: 0, painted: false, changes: [], longTasks: [] };
  try {
    new PerformanceObserver((l) => { for (const e of l.getEntries()) perf.longTasks.push(e.duration); }).observe({ entryTypes: ['longtask'] });
  } catch (e) { /* no long-task timing in this browser */ }

  $('title').textContent = show;
  $('holder').textContent = holder;

  function say(msg) { $('message').textContent = msg || ''; }

  // mine: the seats of my holds that have not expired.
  function mine() {
    const now = Date.now();
    const out = new Set();
    for (const h of myHolds) {
      if (Date.parse(h.expires_at) > now) for (const s of h.seats) out.add(index.get(s));
    }
    return out;
  }

  function stateOf(i, my) {
    const c = states[i];
    if (c === '?' || c === undefined) return 'loading';
    if (c === 's') return 'sold';
    if (c === 'h') return my.has(i) ? 'mine' : 'held';
    return 'free';
  }

  function paint(i, my) {
    const st = stateOf(i, my);
    if (st !== 'free' && selected.has(i)) selected.delete(i);
    view.paint(i, st, selected.has(i));
  }

  function paintAll() {
    const my = mine();
    for (let i = 0; i < layout.length; i++) paint(i, my);
    shownMine = my;
    panel();
  }

  // paintMine draws again only the seats whose "mine" changed (a hold made, expired,
  // confirmed or released): the rest are drawn as their events come.
  function paintMine() {
    const my = mine();
    for (const i of shownMine) if (!my.has(i)) paint(i, my);
    for (const i of my) if (!shownMine.has(i)) paint(i, my);
    shownMine = my;
    panel();
  }

  // setStates takes a snapshot's states; setState one seat's, keeping the counts.
  function setStates(str) {
    states = str.split('');
    counts.f = counts.h = counts.s = 0;
    for (const c of states) if (c in counts) counts[c]++;
  }
  function setState(i, c) {
    if (i === undefined || i < 0 || i >= states.length) return;
    if (states[i] in counts) counts[states[i]]--;
    states[i] = c;
    if (c in counts) counts[c]++;
  }

  function panel() {
    const names = [...selected].map((i) => layout[i].id);
    $('selected').textContent = names.length ? names.join(', ') : 'none';
    $('hold').disabled = names.length === 0;
    const live = myHolds.filter((h) => Date.parse(h.expires_at) > Date.now());
    $('confirm').disabled = live.length === 0;
    $('release').disabled = live.length === 0;
    const ul = $('holds');
    ul.textContent = '';
    for (const h of live) {
      const li = document.createElement('li');
      const left = Math.max(0, Math.ceil((Date.parse(h.expires_at) - Date.now()) / 1000));
      const what = [...h.seats, ...(h.places || []).map((p) => `${p.count} × ${p.area}`)];
      li.textContent = `Held ${what.join(', ')} — ${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')} left`;
      li.className = 'countdown';
      ul.appendChild(li);
    }
    const f = counts.f, hd = counts.h, s = counts.s;
    const st = $('status');
    if (!loaded) {
      st.textContent = connected ? 'loading the seat map…' : 'connecting…';
      st.classList.remove('stale');
      return;
    }
    // A buyer is told what they need: live or not, and the counts. The map's version
    // is for whoever debugs the page, on the element, not in its text.
    st.textContent = connected
      ? `live · ${f} free, ${hd} held, ${s} sold`
      : 'reconnecting… (the map may be out of date)';
    st.dataset.version = version;
    st.classList.toggle('stale', !connected);
  }

  // CANVAS_ABOVE: a show of more seats is drawn on a canvas (one element, seats painted
  // in slices per animation frame) rather than one SVG element per seat; ?draw=svg or
  // ?draw=canvas chooses. Measured with holdfast bench (docs/BENCHMARKS.md).
  const CANVAS_ABOVE = 5000;

  // draw lays the venue out: the layout's coordinates when it has them, else rows of
  // seats stacked by section and row.
  function draw() {
    const t0 = performance.now();
    const hasXY = layout.some((s) => s.x !== 0 || s.y !== 0);
    const pos = [];
    if (hasXY) {
      for (const s of layout) pos.push([s.x, s.y]);
    } else {
      let y = 0, lastSection = null, lastRow = null;
      for (const s of layout) {
        if (s.section !== lastSection) { y += lastSection === null ? 10 : 24; lastSection = s.section; lastRow = s.row; }
        else if (s.row !== lastRow) { y += 14; lastRow = s.row; }
        pos.push([s.position * 12, y]);
      }
    }
    let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
    for (const [x, y] of pos) { minX = Math.min(minX, x); minY = Math.min(minY, y); maxX = Math.max(maxX, x); maxY = Math.max(maxY, y); }
    const pad = 12, left = 30, top = 22; // room for row and section labels
    const box = [minX - left, minY - top, maxX - minX + left + pad, maxY - minY + top + pad];
    const want = new URLSearchParams(location.search).get('draw');
    const canvas = want ? want === 'canvas' : layout.length > CANVAS_ABOVE;
    view = canvas ? canvasView(pos, box) : svgView(pos, box);
    perf.view = canvas ? 'canvas' : 'svg';
    if (view.zoom) zoomControls(pos, box, pad, left, top);
    // For tests: a seat's drawn state, and where it is on the screen.
    window.holdfastMap = {
      view: perf.view,
      seats: () => layout.length,
      states: () => layout.map((_, i) => view.stateAt(i)),
      state: (id) => (index.has(id) ? view.stateAt(index.get(id)) : ''),
      point: (id) => (index.has(id) ? view.pointOf(index.get(id)) : null),
    };
    view.onPick((n) => {
      if (stateOf(n, mine()) !== 'free') return;
      if (selected.has(n)) selected.delete(n); else selected.add(n);
      paint(n, mine());
      panel();
    });
    perf.draw = performance.now() - t0;
  }

  // zoomControls offers the whole venue and each of its sections: a section's seats are
  // then drawn at least SEAT_MIN_PX across (a finger's target), the map scrolling
  // sideways when the section is wider than the screen.
  function zoomControls(pos, box, pad, left, top) {
    const boxes = new Map();
    layout.forEach((s, i) => {
      const b = boxes.get(s.section) || [Infinity, Infinity, -Infinity, -Infinity];
      const [x, y] = pos[i];
      boxes.set(s.section, [Math.min(b[0], x), Math.min(b[1], y), Math.max(b[2], x), Math.max(b[3], y)]);
    });
    const nav = $('zoom');
    if (!nav) return;
    nav.replaceChildren();
    const choose = (name, b) => {
      const button = document.createElement('button');
      button.type = 'button';
      button.textContent = name === null ? 'Whole venue' : name || 'Closer';
      button.dataset.section = name === null ? '' : name;
      button.addEventListener('click', () => {
        view.zoom(b, name !== null);
        for (const el of nav.children) el.setAttribute('aria-pressed', String(el === button));
      });
      button.setAttribute('aria-pressed', String(name === null));
      nav.appendChild(button);
    };
    choose(null, box);
    for (const [name, [x0, y0, x1, y1]] of boxes) choose(name, [x0 - left, y0 - top, x1 - x0 + left + pad, y1 - y0 + top + pad]);
    nav.hidden = false;
  }

  // SEAT_MIN_PX is the least width of a seat, in CSS pixels, once a section is zoomed
  // into; SEAT_R its radius in the map's units.
  const SEAT_MIN_PX = 24, SEAT_R = 5;

  // labels are the sections' and rows' names and where to write them.
  function labels(pos) {
    const rows = new Map();
    const sections = new Map();
    layout.forEach((s, i) => {
      const key = s.section + '/' + s.row;
      if (!rows.has(key)) rows.set(key, [pos[i][0], pos[i][1], s.row]);
      if (!sections.has(s.section)) sections.set(s.section, [pos[i][0], pos[i][1], s.section]);
    });
    return { rows: [...rows.values()], sections: [...sections.values()] };
  }

  // svgView: a circle per seat, its state in data-state (what the page tests read).
  function svgView(pos, box) {
    const svg = $('map');
    svg.setAttribute('viewBox', box.join(' '));
    const frag = document.createDocumentFragment();
    const circles = [];
    layout.forEach((s, i) => {
      const c = document.createElementNS(SVG, 'circle');
      c.setAttribute('cx', pos[i][0]);
      c.setAttribute('cy', pos[i][1]);
      c.setAttribute('r', SEAT_R);
      c.id = 'seat-' + s.id;
      c.dataset.i = i;
      c.dataset.state = 'loading';
      const t = document.createElementNS(SVG, 'title');
      t.textContent = `${s.id} · ${s.section} row ${s.row} seat ${s.position}`;
      c.appendChild(t);
      circles[i] = c;
      frag.appendChild(c);
    });
    const { rows, sections } = labels(pos);
    for (const [x, y, name] of sections) {
      const t = document.createElementNS(SVG, 'text');
      t.setAttribute('x', x - 18);
      t.setAttribute('y', y - 10);
      t.setAttribute('class', 'section');
      t.textContent = name;
      frag.appendChild(t);
    }
    for (const [x, y, label] of rows) {
      const t = document.createElementNS(SVG, 'text');
      t.setAttribute('x', x - SEAT_R - 4); // a gap before the row's first seat
      t.setAttribute('y', y + 2.5);
      t.setAttribute('class', 'row');
      t.textContent = label;
      frag.appendChild(t);
    }
    svg.appendChild(frag);
    return {
      paint(i, st, sel) {
        const el = circles[i];
        if (!el) return;
        if (el.dataset.state !== st) el.dataset.state = st;
        el.classList.toggle('selected', sel);
      },
      flushed: () => Promise.resolve(),
      stateAt: (i) => circles[i].dataset.state,
      pointOf(i) { const r = circles[i].getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; },
      // zoom shows b (a viewBox); zoomed, wide enough that a seat is SEAT_MIN_PX across.
      zoom(b, zoomed) {
        svg.setAttribute('viewBox', b.join(' '));
        const fit = svg.parentElement.clientWidth;
        // (+ 1 px: rounding never takes a seat below SEAT_MIN_PX)
        svg.style.width = zoomed ? Math.max(fit, Math.ceil(b[2] * (SEAT_MIN_PX + 1) / (2 * SEAT_R))) + 'px' : '';
        svg.style.maxHeight = zoomed ? 'none' : '';
        svg.classList.toggle('zoomed', zoomed);
      },
      onPick(fn) {
        svg.addEventListener('click', (e) => {
          const i = e.target.dataset && e.target.dataset.i;
          if (i !== undefined) fn(Number(i));
        });
      },
    };
  }

  // canvasView: the seats painted on one canvas, fitted to the page's width. Changed
  // seats are queued and painted on the next animation frame, grouped by colour, at
  // most SLICE a frame (a snapshot of a large show is drawn over a few frames, section
  // after section, in layout order), so no frame is long. A click picks the nearest
  // seat through a grid of the seats' positions.
  function canvasView(pos, box) {
    const SLICE = 20000, R = 5;
    const svg = $('map');
    svg.style.display = 'none';
    const cv = document.createElement('canvas');
    cv.id = 'map-canvas';
    cv.setAttribute('role', 'img');
    cv.setAttribute('aria-label', 'seat map');
    cv.style.cssText = 'display:block;width:100%;height:auto;margin:.5rem 0;touch-action:manipulation';
    svg.after(cv);
    const [x0, y0, w, h] = box;
    const cssW = Math.max(200, cv.clientWidth || cv.parentElement.clientWidth || 800);
    const scale = cssW / w;
    const cssH = Math.ceil(h * scale);
    const dpr = Math.max(0.25, Math.min(window.devicePixelRatio || 1, 16384 / cssH, 16384 / cssW));
    cv.width = Math.ceil(cssW * dpr);
    cv.height = Math.ceil(cssH * dpr); // its height follows its width (height: auto)
    const small = R * scale * dpr < 2;
    const g = cv.getContext('2d', { alpha: false });
    g.fillStyle = '#fafafa';
    g.fillRect(0, 0, cv.width, cv.height);
    g.setTransform(scale * dpr, 0, 0, scale * dpr, -x0 * scale * dpr, -y0 * scale * dpr);
    const css = getComputedStyle(document.documentElement);
    const colour = {
      loading: '#d4d4d4', free: css.getPropertyValue('--free').trim(), held: css.getPropertyValue('--held').trim(),
      sold: css.getPropertyValue('--sold').trim(), mine: css.getPropertyValue('--mine').trim(), selected: css.getPropertyValue('--selected').trim(),
    };
    const { sections } = labels(pos);
    g.fillStyle = '#333';
    g.font = `bold ${Math.max(9, 10 / scale)}px system-ui, sans-serif`;
    for (const [x, y, name] of sections) g.fillText(name, x - 18, y - 10);
    const shown = new Array(layout.length).fill('');  // the colour each seat is drawn in
    const states = new Array(layout.length).fill('loading');
    const dirty = [];
    let queued = false, done = null, waiting = null;
    function frame() {
      queued = false;
      const slice = dirty.splice(0, SLICE);
      const by = new Map();
      for (const i of slice) {
        const c = colour[shown[i]] || colour.loading;
        if (!by.has(c)) by.set(c, []);
        by.get(c).push(i);
      }
      for (const [c, list] of by) {
        if (small) { // a seat of a pixel or two: a square says as much, and is cheaper
          g.fillStyle = c;
          g.beginPath();
          for (const i of list) g.rect(pos[i][0] - R, pos[i][1] - R, 2 * R, 2 * R);
          g.fill();
          continue;
        }
        g.fillStyle = '#fafafa'; // a seat's old colour goes first (antialiased edges)
        g.beginPath();
        for (const i of list) g.rect(pos[i][0] - R - 0.5, pos[i][1] - R - 0.5, 2 * R + 1, 2 * R + 1);
        g.fill();
        g.fillStyle = c;
        g.beginPath();
        for (const i of list) { g.moveTo(pos[i][0] + R, pos[i][1]); g.arc(pos[i][0], pos[i][1], R, 0, 2 * Math.PI); }
        g.fill();
      }
      if (dirty.length) schedule();
      else if (waiting) { const f = waiting; waiting = null; done = null; f(); }
    }
    function schedule() { if (!queued) { queued = true; requestAnimationFrame(frame); } }
    // The grid for clicks: cells of 12 units.
    const grid = new Map();
    const cell = (x, y) => Math.floor(x / 12) + ',' + Math.floor(y / 12);
    pos.forEach(([x, y], i) => { const k = cell(x, y); if (!grid.has(k)) grid.set(k, []); grid.get(k).push(i); });
    for (let i = 0; i < layout.length; i++) { shown[i] = 'loading'; dirty.push(i); }
    schedule();
    return {
      paint(i, st, sel) {
        states[i] = st;
        const k = sel ? 'selected' : st;
        if (shown[i] === k) return;
        shown[i] = k;
        dirty.push(i);
        schedule();
      },
      // flushed resolves once every queued seat is on the canvas.
      flushed() {
        if (!dirty.length && !queued) return Promise.resolve();
        if (!done) done = new Promise((res) => { waiting = res; });
        return done;
      },
      onPick(fn) {
        cv.addEventListener('click', (e) => {
          const r = cv.getBoundingClientRect();
          const k = r.width / w; // the page's scale now (the window may have been resized)
          const x = (e.clientX - r.left) / k + x0, y = (e.clientY - r.top) / k + y0;
          let best = -1, bestD = (R + 2) * (R + 2);
          for (let dx = -1; dx <= 1; dx++) for (let dy = -1; dy <= 1; dy++) {
            for (const i of grid.get(cell(x + dx * 12, y + dy * 12)) || []) {
              const d = (pos[i][0] - x) ** 2 + (pos[i][1] - y) ** 2;
              if (d < bestD) { best = i; bestD = d; }
            }
          }
          if (best >= 0) fn(best);
        });
      },
      stateAt: (i) => states[i],
      pointOf(i) {
        const r = cv.getBoundingClientRect();
        const k = r.width / w;
        return [r.left + (pos[i][0] - x0) * k, r.top + (pos[i][1] - y0) * k];
      },
    };
  }

  async function call(method, path, body, extra) {
    await identity;
    const auth = token ? { Authorization: 'Bearer ' + token } : { 'Holder-Id': holder };
    const headers = Object.assign(auth, { 'Content-Type': 'application/json' }, extra || {});
    const res = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
    const text = await res.text();
    const data = text ? JSON.parse(text) : null;
    if (!res.ok) {
      const err = new Error((data && (data.detail || data.title)) || res.statusText);
      err.status = res.status;
      throw err;
    }
    return data;
  }

  $('hold').addEventListener('click', async () => {
    say('');
    try {
      const h = await call('POST', api + '/holds', { seats: [...selected].map((i) => layout[i].id) });
      myHolds.push(h);
      saveHolds();
      selected.clear();
      for (const s of h.seats) setState(index.get(s), 'h');
      paintAll();
    } catch (e) { say('Hold refused: ' + e.message); }
  });

  $('confirm').addEventListener('click', async () => {
    say('');
    for (const h of myHolds.filter((h) => Date.parse(h.expires_at) > Date.now())) {
      try {
        await call('POST', '/v1/bookings', h, { 'Idempotency-Key': 'page-' + h.token.slice(0, 8) + h.generation });
        for (const s of h.seats) setState(index.get(s), 's');
        myHolds = myHolds.filter((x) => x !== h);
      } catch (e) { say('Confirm refused: ' + e.message); }
    }
    saveHolds();
    paintAll();
  });

  $('release').addEventListener('click', async () => {
    say('');
    for (const h of myHolds.filter((h) => Date.parse(h.expires_at) > Date.now())) {
      try {
        await call('POST', '/v1/holds/release', h);
        for (const s of h.seats) setState(index.get(s), 'f');
      } catch (e) { say('Release refused: ' + e.message); }
    }
    myHolds = [];
    saveHolds();
    paintAll();
  });

  // Standing areas: each with its places free, held and sold (the stream's "areas"), a
  // count to hold and its button.
  const areas = new Map(); // id -> {id, capacity, free, held, sold}
  function setAreas(list) {
    for (const a of list || []) areas.set(a.id, a);
    const box = $('areas');
    box.hidden = areas.size === 0;
    const ul = $('area-list');
    for (const a of areas.values()) {
      let li = ul.querySelector(`li[data-area="${CSS.escape(a.id)}"]`);
      if (!li) {
        li = document.createElement('li');
        li.dataset.area = a.id;
        const label = document.createElement('span');
        const n = document.createElement('input');
        Object.assign(n, { type: 'number', min: 1, value: 1, size: 3 });
        n.setAttribute('aria-label', 'places of ' + a.id);
        const b = document.createElement('button');
        b.textContent = 'Hold places';
        b.addEventListener('click', () => holdPlaces(a.id, Number(n.value)));
        li.append(label, ' ', n, ' ', b);
        ul.append(li);
      }
      li.querySelector('span').textContent = `${a.id}: ${a.free} of ${a.capacity} free (${a.held} held, ${a.sold} sold)`;
      li.querySelector('input').max = a.free;
      li.querySelector('button').disabled = a.free < 1;
    }
  }

  async function holdPlaces(area, count) {
    say('');
    try {
      const h = await call('POST', api + '/holds', { places: [{ area, count }] });
      myHolds.push(h);
      saveHolds();
      panel();
    } catch (e) { say('Hold refused: ' + e.message); }
  }

  function listen() {
    const es = new EventSource(api + '/events');
    es.addEventListener('snapshot', (e) => {
      const t0 = performance.now();
      const m = JSON.parse(e.data);
      setStates(m.states);
      setAreas(m.areas);
      version = m.version;
      connected = true;
      loaded = true;
      document.body.dataset.loaded = 'true';
      paintAll();
      view.flushed().then(() => { perf.snapshot = performance.now() - t0; perf.painted = true; });
    });
    es.addEventListener('changes', (e) => {
      const t0 = performance.now();
      const m = JSON.parse(e.data);
      for (const c of m.changes) setState(c.i, c.s);
      setAreas(m.areas);
      version = m.version;
      const my = mine();
      for (const c of m.changes) paint(c.i, my);
      panel();
      if (perf.changes.length < 100000) perf.changes.push(performance.now() - t0);
    });
    es.onopen = () => { connected = true; panel(); };
    es.onerror = () => { connected = false; panel(); };
  }

  // The waiting room, when the show has one: join, then follow the line on the show's
  // queue stream (a place moves down by the admissions since the ticket), and enter —
  // the map — once the ticket says admitted.
  async function waitingRoom() {
    let rules;
    try {
      const res = await fetch(api + '/rules');
      if (!res.ok) return true; // no rules to read: try the sale, the API decides
      rules = await res.json();
    } catch (e) { return true; }
    if (!rules.queue) return true;
    $('queue').hidden = false;
    $('sale').hidden = true;
    $('status').textContent = 'waiting room';
    const opensAt = Date.parse(rules.queue.opens_at);
    let ticket = null;
    const show = (t) => {
      ticket = t;
      $('queue-waiting').textContent = t.waiting;
      $('queue-admitted').textContent = t.admitted_total;
      render(t.position, t.admit_rate, t.sold_out, t.opened);
    };
    const render = (position, rate, soldOut, opened) => {
      const st = $('queue-state');
      st.classList.toggle('soldout', soldOut);
      if (soldOut) {
        st.textContent = 'Sold out: every seat is sold. You keep your place in case one comes back.';
      } else if (!opened) {
        const left = Math.max(0, Math.ceil((opensAt - Date.now()) / 1000));
        st.textContent = `The sale opens in ${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')}. Everyone in line before then gets a place drawn at random — no need to refresh.`;
      } else {
        st.textContent = 'The sale is open: you are let in as seats free up.';
      }
      $('queue-position').textContent = opened ? String(Math.max(1, position)) : `one of ${position} in the draw`;
      $('queue-eta').textContent = !opened ? '' : rate > 0 ? `· about ${eta(position / rate)} to go` : '· an estimate shows once the line moves';
      document.body.dataset.queuePosition = opened ? String(position) : 'draw';
    };
    const eta = (s) => s < 60 ? 'under a minute' : s < 3600 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`;
    const join = () => call('POST', api + '/queue');
    const check = async () => {
      try { return await call('GET', api + '/queue'); } catch (e) {
        if (e.status === 404) return join(); // out of the room (Redis lost it, or the admission ran out): join again
        throw e;
      }
    };
    try { show(await join()); } catch (e) { $('queue-state').textContent = 'Could not join the line: ' + e.message; }
    if (ticket && ticket.admitted) return admitted(ticket);
    return new Promise((resolve) => {
      const es = new EventSource(api + '/queue/events');
      let busy = false;
      const refresh = async () => {
        if (busy) return;
        busy = true;
        try {
          const t = await check();
          show(t);
          if (t.admitted) { es.close(); clearInterval(timer); resolve(admitted(t)); }
        } catch (e) { /* keep waiting; the next event or tick asks again */ }
        busy = false;
      };
      es.addEventListener('queue', (e) => {
        const q = JSON.parse(e.data);
        $('queue-waiting').textContent = q.waiting;
        $('queue-admitted').textContent = q.admitted_total;
        if (!ticket) return;
        if (q.opened !== ticket.opened) { refresh(); return; }
        const position = ticket.position - (q.admitted_total - ticket.admitted_total);
        render(position, q.admit_rate, q.sold_out, q.opened);
        if (position <= 0) refresh();
      });
      // The stream moves the number; the ticket is asked again now and then (and at
      // the opening's draw), in case the line moved another way.
      const timer = setInterval(() => {
        if (ticket && !ticket.opened && Date.now() >= opensAt) refresh();
        else if (ticket && !ticket.opened) render(ticket.position, 0, false, false);
      }, 1000);
      setInterval(refresh, 15000);
    });
  }

  function admitted(t) {
    $('queue').hidden = true;
    $('sale').hidden = false;
    const until = new Date(t.admitted_until);
    $('admission').textContent = `You were let in from the waiting room: hold seats before ${until.toLocaleTimeString()}.`;
    return true;
  }

  async function start() {
    await waitingRoom();
    try {
      const res = await fetch(api + '/layout?format=compact');
      if (!res.ok) { say(res.status === 404 ? `No show "${show}".` : 'Could not load the layout.'); return; }
      const c = await res.json(); // by column: rebuilt here as one object per seat
      layout = c.ids.map((id, i) => ({ id, section: c.sections[c.section[i]], row: c.rows[c.row[i]], position: c.position[i], rank: c.rank[i], x: c.x[i], y: c.y[i] }));
    } catch (e) { say('Could not load the layout: ' + e.message); return; }
    layout.forEach((s, i) => index.set(s.id, i));
    states = new Array(layout.length).fill('?'); // unknown until the stream's first snapshot
    draw();
    document.body.dataset.seats = String(layout.length);
    listen();
    // Countdowns, and my expired holds dropped.
    setInterval(() => {
      const before = myHolds.length;
      myHolds = myHolds.filter((h) => Date.parse(h.expires_at) > Date.now() - 1000);
      if (myHolds.length !== before) saveHolds();
      paintMine();
    }, 250);
  }
  start();
})();
