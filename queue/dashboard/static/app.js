// skiplock dashboard: confirmations, select-all, and a light auto-refresh
// that swaps <main> for a fresh copy unless someone is busy with it.
(function () {
  "use strict";

  document.addEventListener("submit", function (e) {
    var el = e.submitter && e.submitter.dataset.confirm ? e.submitter : e.target;
    var msg = el.dataset.confirm;
    if (e.submitter && e.submitter.hasAttribute("data-needs-selection")) {
      var n = document.querySelectorAll('input[name="id"]:checked').length;
      if (n === 0) {
        e.preventDefault();
        alert("Select tasks first.");
        return;
      }
      msg = msg.replace("{n}", String(n));
    }
    if (msg && !window.confirm(msg)) {
      e.preventDefault();
    }
  });

  document.addEventListener("change", function (e) {
    if (e.target.id === "all") {
      document.querySelectorAll('input[name="id"]').forEach(function (box) {
        box.checked = e.target.checked;
      });
    }
  });

  var seconds = parseInt(document.body.dataset.refresh || "0", 10);
  var live = document.getElementById("live");
  var paused = sessionStorage.getItem("skiplock-paused") === "1";
  function show() {
    if (live) {
      live.textContent = paused ? "paused" : "live · " + seconds + "s";
      live.classList.toggle("off", paused);
    }
  }
  if (live) {
    live.addEventListener("click", function () {
      paused = !paused;
      sessionStorage.setItem("skiplock-paused", paused ? "1" : "0");
      show();
    });
  }
  show();
  // The button shows its real state from here on (the server cannot know
  // it); tests wait for this before they read or click it.
  document.documentElement.dataset.js = "ready";
  if (!seconds) {
    return;
  }

  function busy() {
    var a = document.activeElement;
    if (a && a !== document.body && a.closest("main") && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(a.tagName)) {
      return true;
    }
    if (document.querySelector('main input[type="checkbox"]:checked')) {
      return true;
    }
    var sel = window.getSelection();
    return sel && !sel.isCollapsed;
  }

  var inflight = false;
  function refresh() {
    if (paused || inflight || document.hidden || busy()) {
      return;
    }
    inflight = true;
    // A request that never answers must not stop the refresh for good.
    var ctl = new AbortController();
    var timer = setTimeout(function () {
      ctl.abort();
    }, Math.max(10, 3 * seconds) * 1000);
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" }, signal: ctl.signal })
      .then(function (r) {
        if (!r.ok) {
          throw new Error(r.status);
        }
        return r.text();
      })
      .then(function (html) {
        if (paused || busy()) {
          return;
        }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var main = document.getElementById("main");
        if (!fresh || !main) {
          return;
        }
        var flash = main.querySelector(".flash");
        main.replaceChildren.apply(main, Array.from(fresh.childNodes).map(function (n) {
          return document.adoptNode(n);
        }));
        if (flash && !main.querySelector(".flash")) {
          main.prepend(flash);
        }
        document.body.dataset.refreshed = String(Date.now());
        show(); // "offline" no more
      })
      .catch(function () {
        if (live) {
          live.textContent = "offline";
        }
      })
      .finally(function () {
        clearTimeout(timer);
        inflight = false;
      });
  }
  setInterval(refresh, seconds * 1000);
})();
