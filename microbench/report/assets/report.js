/* microbench report: hover values and show/hide series. The page is complete without this script. */
(function () {
  "use strict";
  var tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  document.body.appendChild(tip);
  var hot = null;

  function show(text, e) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = (e.pageX + 14) + "px";
    tip.style.top = (e.pageY + 12) + "px";
  }
  function hide() { tip.hidden = true; }
  function unmark() { if (hot) { hot.classList.remove("hot"); } hot = null; }

  /* A point's tooltip: its series, its x, its value (and band) with the chart's unit. */
  function pointText(svg, c) {
    var d = svg.dataset, p = c.dataset, g = c.parentNode.dataset;
    var lines = [g.label, p.x, (g.what || d.what) + ": " + p.y + " " + d.unit];
    if (p.lo !== undefined && d.band) { lines.push(d.band + ": " + p.lo + " .. " + p.hi + " " + d.unit); }
    return lines.join("\n");
  }

  /* The visible point nearest the pointer, within 30 px. */
  function nearest(svg, e) {
    var best = null, bestD = 900;
    svg.querySelectorAll("g.series:not(.off) circle[data-y]").forEach(function (c) {
      var r = c.getBoundingClientRect();
      var dx = r.left + r.width / 2 - e.clientX, dy = r.top + r.height / 2 - e.clientY;
      if (dx * dx + dy * dy < bestD) { bestD = dx * dx + dy * dy; best = c; }
    });
    return best;
  }

  document.querySelectorAll("svg.chart").forEach(function (svg) {
    if (!svg.querySelector("circle[data-y]")) { return; }
    svg.addEventListener("mousemove", function (e) {
      var c = nearest(svg, e);
      unmark();
      if (!c) { hide(); return; }
      hot = c;
      c.classList.add("hot");
      show(pointText(svg, c), e);
    });
    svg.addEventListener("mouseleave", function () { unmark(); hide(); });
  });

  document.addEventListener("mouseover", function (e) {
    var t = e.target.closest ? e.target.closest("[data-tip]") : null;
    if (t) { show(t.dataset.tip, e); }
  });
  document.addEventListener("mouseout", function (e) {
    var t = e.target.closest ? e.target.closest("[data-tip]") : null;
    if (t) { hide(); }
  });

  /* A button shows or hides every series of its figure group whose data-keys hold its data-toggle token. */
  function seriesOf(group, token) {
    return group.querySelectorAll('g.series[data-keys~="' + token + '"]');
  }
  function sync(group) {
    group.querySelectorAll("button[data-toggle]").forEach(function (b) {
      var on = Array.prototype.some.call(seriesOf(group, b.dataset.toggle), function (g) {
        return !g.classList.contains("off");
      });
      b.setAttribute("aria-pressed", on ? "true" : "false");
    });
  }
  document.querySelectorAll(".figure-group").forEach(function (group) {
    group.addEventListener("click", function (e) {
      var b = e.target.closest("button[data-toggle]");
      if (!b) { return; }
      var turnOn = b.getAttribute("aria-pressed") !== "true";
      seriesOf(group, b.dataset.toggle).forEach(function (g) { g.classList.toggle("off", !turnOn); });
      sync(group);
    });
    sync(group);
  });
}());
