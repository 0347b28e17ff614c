// outbox admin: live refresh that can be paused (p), deadline countdowns,
// "/" focuses the first filter field. No other script runs.
(function () {
  "use strict";
  var body = document.body;
  var pauseBtn = document.getElementById("pause");
  var paused = localStorage.getItem("outbox-refresh-paused") === "1";
  var timer = null;

  function show() {
    if (!pauseBtn) return;
    pauseBtn.textContent = paused ? "Resume refresh" : "Pause refresh";
    pauseBtn.setAttribute("aria-pressed", paused ? "true" : "false");
  }
  function schedule() {
    if (timer) clearTimeout(timer);
    var secs = parseInt(body.getAttribute("data-refresh") || "0", 10);
    if (!secs || paused) return;
    timer = setTimeout(function () {
      // Do not reload under someone typing into a form.
      var a = document.activeElement;
      if (a && (a.tagName === "INPUT" || a.tagName === "SELECT")) { schedule(); return; }
      location.reload();
    }, secs * 1000);
  }
  function toggle() {
    paused = !paused;
    localStorage.setItem("outbox-refresh-paused", paused ? "1" : "0");
    show();
    schedule();
  }
  if (pauseBtn) pauseBtn.addEventListener("click", toggle);
  document.addEventListener("keydown", function (e) {
    var t = e.target.tagName;
    if (t === "INPUT" || t === "SELECT" || t === "TEXTAREA" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "p" && pauseBtn) { toggle(); e.preventDefault(); }
    if (e.key === "/") {
      var f = document.querySelector(".filters input, .filters select");
      if (f) { f.focus(); e.preventDefault(); }
    }
  });
  function tick() {
    var els = document.querySelectorAll("[data-deadline]");
    for (var i = 0; i < els.length; i++) {
      var ms = new Date(els[i].getAttribute("data-deadline")).getTime() - Date.now();
      var s = Math.round(Math.abs(ms) / 1000);
      var txt = (s >= 3600 ? Math.floor(s / 3600) + "h" : "") + (s >= 60 ? Math.floor(s % 3600 / 60) + "m" : "") + (s % 60) + "s";
      els[i].textContent = ms >= 0 ? txt + " left" : "passed " + txt + " ago";
      els[i].classList.toggle("err", ms < 0);
    }
  }
  show();
  schedule();
  tick();
  setInterval(tick, 1000);
})();
