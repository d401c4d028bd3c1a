'use strict';
document.getElementById('open').addEventListener('submit', (e) => {
  e.preventDefault();
  location.href = '/shows/' + encodeURIComponent(document.getElementById('show').value);
});

// The shows, newest first, with how much of each is sold; refreshed every 5 s so a sale
// in progress (make demo) shows its count moving.
const state = document.getElementById('shows-state');
const table = document.getElementById('shows');
async function loadShows() {
  try {
    const r = await fetch('/v1/shows?limit=20', {headers: {Accept: 'application/json'}});
    if (!r.ok) throw new Error('status ' + r.status);
    const {shows} = await r.json();
    const body = table.tBodies[0];
    body.replaceChildren(...shows.map((s) => {
      const tr = document.createElement('tr');
      const a = document.createElement('a');
      a.href = s.page;
      a.textContent = s.id;
      const name = document.createElement('td');
      name.append(a);
      const sold = document.createElement('td');
      sold.textContent = s.sold + ' / ' + s.seats;
      const at = document.createElement('td');
      at.textContent = new Date(s.created_at).toLocaleString();
      tr.append(name, sold, at);
      return tr;
    }));
    table.hidden = shows.length === 0;
    state.textContent = shows.length === 0 ? 'No shows yet.' : '';
  } catch (err) {
    state.textContent = 'The shows could not be loaded (' + err.message + '); retrying.';
  }
}
loadShows();
setInterval(loadShows, 5000);
