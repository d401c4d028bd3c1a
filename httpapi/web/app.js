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
  let states = '';           // one char per seat: f, h, s; '?' until the first snapshot
  const index = new Map();   // seat id -> layout index
  const circles = [];        // by layout index
  const selected = new Set();// layout indices
  let version = '';
  let connected = false;
  let loaded = false;        // a snapshot has come: until then no seat is drawn free

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
    const el = circles[i];
    if (!el) return;
    const st = stateOf(i, my);
    if (el.dataset.state !== st) el.dataset.state = st;
    if (st !== 'free' && selected.has(i)) selected.delete(i);
    el.classList.toggle('selected', selected.has(i));
  }

  function paintAll() {
    const my = mine();
    for (let i = 0; i < layout.length; i++) paint(i, my);
    panel();
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
      li.textContent = `Held ${h.seats.join(', ')} — ${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')} left`;
      li.className = 'countdown';
      ul.appendChild(li);
    }
    let f = 0, hd = 0, s = 0;
    for (let i = 0; i < states.length; i++) { const c = states[i]; if (c === 'f') f++; else if (c === 'h') hd++; else s++; }
    const st = $('status');
    if (!loaded) {
      st.textContent = connected ? 'loading the seat map…' : 'connecting…';
      st.classList.remove('stale');
      return;
    }
    st.textContent = connected
      ? `live · version ${version} · ${f} free, ${hd} held, ${s} sold`
      : 'reconnecting… (the map may be out of date)';
    st.classList.toggle('stale', !connected);
  }

  // draw lays the venue out: the layout's coordinates when it has them, else rows of
  // seats stacked by section and row.
  function draw() {
    const svg = $('map');
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
    svg.setAttribute('viewBox', `${minX - left} ${minY - top} ${maxX - minX + left + pad} ${maxY - minY + top + pad}`);
    const frag = document.createDocumentFragment();
    const rows = new Map();
    const sections = new Map();
    layout.forEach((s, i) => {
      const c = document.createElementNS(SVG, 'circle');
      c.setAttribute('cx', pos[i][0]);
      c.setAttribute('cy', pos[i][1]);
      c.setAttribute('r', 5);
      c.id = 'seat-' + s.id;
      c.dataset.i = i;
      c.dataset.state = 'loading';
      const t = document.createElementNS(SVG, 'title');
      t.textContent = `${s.id} · ${s.section} row ${s.row} seat ${s.position}`;
      c.appendChild(t);
      circles[i] = c;
      frag.appendChild(c);
      const key = s.section + '/' + s.row;
      if (!rows.has(key)) rows.set(key, [pos[i][0], pos[i][1], s.row]);
      if (!sections.has(s.section)) sections.set(s.section, [pos[i][0], pos[i][1]]);
    });
    for (const [name, [x, y]] of sections) {
      const t = document.createElementNS(SVG, 'text');
      t.setAttribute('x', x - 18);
      t.setAttribute('y', y - 10);
      t.setAttribute('class', 'section');
      t.textContent = name;
      frag.appendChild(t);
    }
    for (const [x, y, label] of rows.values()) {
      const t = document.createElementNS(SVG, 'text');
      t.setAttribute('x', x - 18);
      t.setAttribute('y', y + 2.5);
      t.textContent = label;
      frag.appendChild(t);
    }
    svg.appendChild(frag);
    svg.addEventListener('click', (e) => {
      const i = e.target.dataset && e.target.dataset.i;
      if (i === undefined) return;
      const n = Number(i);
      if (stateOf(n, mine()) !== 'free') return;
      if (selected.has(n)) selected.delete(n); else selected.add(n);
      paint(n, mine());
      panel();
    });
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
      for (const s of h.seats) states = setChar(states, index.get(s), 'h');
      paintAll();
    } catch (e) { say('Hold refused: ' + e.message); }
  });

  $('confirm').addEventListener('click', async () => {
    say('');
    for (const h of myHolds.filter((h) => Date.parse(h.expires_at) > Date.now())) {
      try {
        await call('POST', '/v1/bookings', h, { 'Idempotency-Key': 'page-' + h.token.slice(0, 8) + h.generation });
        for (const s of h.seats) states = setChar(states, index.get(s), 's');
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
        for (const s of h.seats) states = setChar(states, index.get(s), 'f');
      } catch (e) { say('Release refused: ' + e.message); }
    }
    myHolds = [];
    saveHolds();
    paintAll();
  });

  function setChar(str, i, c) { return i === undefined ? str : str.slice(0, i) + c + str.slice(i + 1); }

  function listen() {
    const es = new EventSource(api + '/events');
    es.addEventListener('snapshot', (e) => {
      const m = JSON.parse(e.data);
      states = m.states;
      version = m.version;
      connected = true;
      loaded = true;
      document.body.dataset.loaded = 'true';
      paintAll();
    });
    es.addEventListener('changes', (e) => {
      const m = JSON.parse(e.data);
      const chars = states.split('');
      for (const c of m.changes) chars[c.i] = c.s;
      states = chars.join('');
      version = m.version;
      const my = mine();
      for (const c of m.changes) paint(c.i, my);
      panel();
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
      const res = await fetch(api + '/layout');
      if (!res.ok) { say(res.status === 404 ? `No show "${show}".` : 'Could not load the layout.'); return; }
      layout = (await res.json()).seats;
    } catch (e) { say('Could not load the layout: ' + e.message); return; }
    layout.forEach((s, i) => index.set(s.id, i));
    states = '?'.repeat(layout.length); // unknown until the stream's first snapshot
    draw();
    document.body.dataset.seats = String(layout.length);
    listen();
    // Countdowns, and my expired holds dropped.
    setInterval(() => {
      const before = myHolds.length;
      myHolds = myHolds.filter((h) => Date.parse(h.expires_at) > Date.now() - 1000);
      if (myHolds.length !== before) saveHolds();
      paintAll();
    }, 250);
  }
  start();
})();
