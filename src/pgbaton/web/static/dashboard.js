// pgbaton dashboard: confirm actions, keep the overview live (server-sent events,
// polling when the stream cannot be opened), select rows of the job list and keep its
// state tabs' counts fresh. Shipped in the wheel; no library.
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

// A region marked data-refresh="S" (a running job's progress and log lines, the list of
// running jobs) is read again from this page every S seconds; the server escaped it.
function startRefresh() {
  for (const region of document.querySelectorAll("[data-refresh]")) {
    const seconds = Math.max(1, Number(region.dataset.refresh) || 2);
    window.setInterval(() => {
      // Rows an operator has ticked stay as they are until the selection is sent.
      if (region.querySelector("input.select:checked")) return;
      fetch(window.location.href, { headers: { Accept: "text/html" } })
        .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
        .then((html) => {
          const page = new DOMParser().parseFromString(html, "text/html");
          const fresh = page.getElementById(region.id);
          if (fresh) region.innerHTML = fresh.innerHTML;
        })
        .catch(() => {});
    }, seconds * 1000);
  }
}


// The job list: checked rows enable the selection's buttons, which send their ids to
// the bulk page (it counts them and asks before anything changes).
function startSelection() {
  const form = document.getElementById("selection");
  if (!form) return;
  const boxes = () => Array.from(document.querySelectorAll("input.select"));
  const all = document.getElementById("select-all");
  const said = document.getElementById("selected-count");
  const update = () => {
    const checked = boxes().filter((b) => b.checked).length;
    said.textContent = `${checked} selected`;
    form.querySelectorAll("button").forEach((b) => { b.disabled = checked === 0; });
    if (all) all.checked = checked > 0 && checked === boxes().length;
  };
  document.addEventListener("change", (event) => {
    if (event.target === all) boxes().forEach((b) => { b.checked = all.checked; });
    if (event.target === all || event.target.classList.contains("select")) update();
  });
  update();
}

// The job list's state tabs: their counts fetched again while the page is in view,
// every 5 s, or four times as long as the last count took (data-every, in ms).
function startTabs() {
  const tabs = document.getElementById("state-tabs");
  if (!tabs || !tabs.dataset.poll) return;
  const next = () => window.setTimeout(refresh, Number(tabs.dataset.every) || 5000);
  const refresh = () => {
    if (document.hidden) { next(); return; }
    fetch(tabs.dataset.poll, { headers: { Accept: "text/html" } })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => {
        const fresh = new DOMParser().parseFromString(html, "text/html")
          .getElementById("state-tabs");
        if (fresh) {
          tabs.innerHTML = fresh.innerHTML;
          tabs.dataset.every = fresh.dataset.every;
        }
      })
      .catch(() => {})
      .finally(next);
  };
  next();
}

document.addEventListener("DOMContentLoaded", startLive);
document.addEventListener("DOMContentLoaded", startSelection);
document.addEventListener("DOMContentLoaded", startTabs);
document.addEventListener("DOMContentLoaded", startRefresh);
