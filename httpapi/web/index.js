'use strict';
document.getElementById('open').addEventListener('submit', (e) => {
  e.preventDefault();
  location.href = '/shows/' + encodeURIComponent(document.getElementById('show').value);
});
