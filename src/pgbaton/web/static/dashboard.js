// pgbaton dashboard: confirm actions, and keep the overview live (server-sent events,
// polling when the stream cannot be opened). Shipped in the wheel; no library.
"use strict";

document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

function startLive() {
  const panel = document.getElementById("overview");
  if (!panel) return;
  const badge = document.getElementById("live-state");
  let polling = null;
  const poll = () => {
    fetch(panel.dataset.poll, { headers: { Accept: "text/html" } })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => { panel.innerHTML = html; })
      .catch(() => {});
  };
  const fallBack = () => {
    if (polling) return;
    badge.textContent = "polling";
    badge.classList.remove("on");
    polling = window.setInterval(poll, 5000);
  };
  if (!window.EventSource) { fallBack(); return; }
  const stream = new EventSource(panel.dataset.live);
  let failures = 0;
  stream.addEventListener("open", () => {
    failures = 0;
    badge.textContent = "live";
    badge.classList.add("on");
    if (polling) { window.clearInterval(polling); polling = null; }
  });
  stream.addEventListener("overview", (event) => { panel.innerHTML = event.data; });
  stream.addEventListener("error", () => {
    failures += 1;
    if (failures >= 3) fallBack();
  });
}

document.addEventListener("DOMContentLoaded", startLive);
