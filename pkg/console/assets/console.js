// dlb's web console: polls /api/snapshot and renders it. Read-only; no
// framework, no build step. Counters arrive cumulative and are turned into
// per-second rates here, between two snapshots.
'use strict';

(function () {
  const HISTORY = 60; // points per chart
  const MINPOINTS = 10;
  const SVGNS = 'http://www.w3.org/2000/svg';

  // Rates: key -> {v, t, rate, h}. Keys seen in the latest render are
  // kept; the others are dropped.
  const series = new Map();
  let seen = new Set();

  function track(key, value, t) {
    seen.add(key);
    let s = series.get(key);
    if (!s) {
      series.set(key, { v: value, t: t, rate: null, h: [] });
      return series.get(key);
    }
    const dt = (t - s.t) / 1000;
    if (dt <= 0) {
      return s;
    }
    s.rate = value >= s.v ? (value - s.v) / dt : 0;
    s.v = value;
    s.t = t;
    s.h.push(s.rate);
    if (s.h.length > HISTORY) {
      s.h.shift();
    }
    return s;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) {
      e.className = cls;
    }
    if (text !== undefined) {
      e.textContent = text;
    }
    return e;
  }

  // One formatter for every figure: Number.toLocaleString builds one per
  // call, which took half the page's time with thousands of ports.
  const intFormat = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

  function fmtInt(n) {
    return intFormat.format(Math.round(n));
  }

  function fmtRate(r) {
    if (r === null || r === undefined) {
      return '…';
    }
    if (r >= 100) {
      return fmtInt(r);
    }
    return r.toFixed(r >= 10 ? 1 : 2);
  }

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
  }

  // chart makes a small live chart: an SVG polyline and the latest figure.
  function chart() {
    const wrap = el('span', 'chart');
    const svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('viewBox', '0 0 90 20');
    svg.setAttribute('preserveAspectRatio', 'none');
    const line = document.createElementNS(SVGNS, 'polyline');
    svg.appendChild(line);
    const n = el('span', 'n', '…');
    wrap.appendChild(svg);
    wrap.appendChild(n);
    return { wrap: wrap, line: line, n: n };
  }

  function drawChart(c, s) {
    c.n.textContent = fmtRate(s.rate);
    const h = s.h;
    if (h.length === 0) {
      c.line.setAttribute('points', '');
      return;
    }
    // Until the history is long enough, the points spread over the
    // whole width (at least MINPOINTS apart), newest on the right.
    const top = Math.max(1, ...h);
    const step = 90 / (Math.max(h.length, MINPOINTS) - 1);
    const x0 = 90 - step * (h.length - 1);
    const pts = h.map(function (v, i) {
      return (x0 + i * step).toFixed(1) + ',' + (19 - (v / top) * 18).toFixed(1);
    });
    c.line.setAttribute('points', pts.join(' '));
  }

  // --- clusters, ports and servers ---

  const ports = new Map(); // port key -> {card, head, tbody, rows: Map}

  function portCard(p, cluster) {
    const card = el('div', 'port');
    card.dataset.port = p.key;
    const head = el('div', 'port-head');
    const title = el('h3', '', p.key);
    const proto = el('span', 'muted', p.protocol + ' · ' + p.method);
    const figs = el('span', 'figs');
    const alert = el('span', 'badge', 'no server takes new connections');
    alert.hidden = true;
    const newc = chart();
    const pkts = chart();
    head.append(title, proto, figs, el('span', 'muted', 'new conn/s'), newc.wrap, el('span', 'muted', 'packets/s'), pkts.wrap, alert);
    card.appendChild(head);
    const table = el('table', 'data');
    const thead = el('thead');
    const hr = el('tr');
    for (const [name, num] of [['server', false], ['weight', true], ['current', true], ['state', false], ['advisor', true],
      ['system', true], ['active', true], ['new conn/s', false], ['packets/s', false], ["manager's reason", false]]) {
      hr.appendChild(el('th', num ? 'num' : '', name));
    }
    thead.appendChild(hr);
    const tbody = el('tbody');
    table.append(thead, tbody);
    card.appendChild(table);
    return { card: card, figs: figs, alert: alert, newc: newc, pkts: pkts, table: table, tbody: tbody, rows: new Map(), cluster: cluster };
  }

  function serverRow(s) {
    const tr = el('tr');
    tr.dataset.key = s.key;
    const c = {
      tr: tr, addr: el('td', '', s.address), weight: el('td', 'num'), current: el('td', 'num'),
      state: el('td'), stateBadge: el('span', 'state'), stateFor: el('span', 'muted for'), advisor: el('td', 'num'),
      system: el('td', 'num'), active: el('td', 'num'), newc: chart(), pkts: chart(), reason: el('td', 'reason'),
    };
    c.state.append(c.stateBadge, c.stateFor);
    const tdNew = el('td');
    tdNew.appendChild(c.newc.wrap);
    const tdPkts = el('td');
    tdPkts.appendChild(c.pkts.wrap);
    tr.append(c.addr, c.weight, c.current, c.state, c.advisor, c.system, c.active, tdNew, tdPkts, c.reason);
    return c;
  }

  // ago says how long before t a time was: "45s", "3m10s", "2h5m", "3d4h".
  function ago(at, t) {
    let sec = Math.max(0, Math.floor((t - Date.parse(at)) / 1000));
    const parts = [[86400, 'd'], [3600, 'h'], [60, 'm'], [1, 's']];
    for (let i = 0; i < parts.length; i++) {
      const [n, unit] = parts[i];
      if (sec >= n || n === 1) {
        const hi = Math.floor(sec / n);
        if (i + 1 < parts.length && n > 1) {
          const [m, u2] = parts[i + 1];
          const lo = Math.floor((sec - hi * n) / m);
          return hi + unit + (lo > 0 ? lo + u2 : '');
        }
        return hi + unit;
      }
    }
    return '0s';
  }

  // stateSince is when the server entered its state, as its advisors
  // say: failed since the first advisor now finding it down did, up
  // since the last one now finding it up did. null without advisors.
  function stateSince(s) {
    const down = s.state === 'failed';
    let at = null;
    for (const a of s.advisors) {
      if ((a.state === 'down') !== down || !(Date.parse(a.since) > 0)) {
        continue;
      }
      const ts = Date.parse(a.since);
      if (at === null || (down ? ts < at : ts > at)) {
        at = ts;
      }
    }
    return at === null ? null : new Date(at).toISOString();
  }

  function renderServer(c, s, t) {
    c.tr.dataset.state = s.state;
    c.addr.title = s.mac ? 'next hop MAC ' + s.mac : 'next hop not resolved';
    const since = stateSince(s);
    c.stateFor.textContent = since ? ' ' + ago(since, t) : '';
    c.stateFor.title = since ? 'since ' + new Date(since).toLocaleString() + ', as its advisors say' : '';
    c.advisor.title = s.advisors.map(function (a) {
      let line = a.advisor + ': ' + a.state;
      if (Date.parse(a.since) > 0) {
        line += ' for ' + ago(a.since, t);
      }
      if (a.last_error) {
        line += ' (' + a.last_error + ')';
      }
      return line + '; ' + fmtInt(a.probes) + ' probes, ' + fmtInt(a.failures) + ' failed';
    }).join('\n') || 'no advisor probes this port';
    c.system.textContent = s.system_load >= 0 ? fmtInt(s.system_load) : '–';
    c.system.title = s.system_load >= 0 ? "the metric server's load, 0..100" : 'no metric server reports (or its report is stale)';
    c.weight.textContent = s.weight;
    c.current.textContent = s.current_weight;
    c.stateBadge.className = 'state ' + s.state;
    c.stateBadge.textContent = s.state;
    if (s.advisor_load_ms < 0) {
      c.advisor.textContent = 'down';
      c.advisor.className = 'num adv-down';
    } else {
      c.advisor.textContent = s.advisor_load_ms > 0 ? s.advisor_load_ms + ' ms' : '–';
      c.advisor.className = 'num';
    }
    c.advisor.dataset.load = s.advisor_load_ms;
    c.active.textContent = fmtInt(s.active);
    drawChart(c.newc, track('s:' + s.key + ':new', s.new_connections, t));
    drawChart(c.pkts, track('s:' + s.key + ':pkts', s.packets, t));
    c.reason.textContent = s.reason || '';
  }

  function renderClusters(v, t) {
    const root = document.getElementById('clusters');
    const keep = new Set();
    let order = [];
    for (const cl of v.clusters) {
      for (const p of cl.ports) {
        keep.add(p.key);
        let pc = ports.get(p.key);
        if (!pc) {
          pc = portCard(p, cl.address);
          ports.set(p.key, pc);
        }
        order.push(pc.card);
        pc.card.classList.toggle('alert', p.alert);
        pc.alert.hidden = !p.alert;
        pc.figs.textContent = p.server_count + ' servers · ' + fmtInt(p.active) + ' active · ' +
          fmtInt(p.new_connections) + ' connections · ' + fmtInt(p.half_open) + ' half-open';
        drawChart(pc.newc, track('p:' + p.key + ':new', p.new_connections, t));
        drawChart(pc.pkts, track('p:' + p.key + ':pkts', p.packets, t));
        pc.table.hidden = !v.servers_listed;
        const rowKeep = new Set();
        const rowOrder = [];
        for (const s of p.servers) {
          rowKeep.add(s.key);
          let rc = pc.rows.get(s.key);
          if (!rc) {
            rc = serverRow(s);
            pc.rows.set(s.key, rc);
          }
          renderServer(rc, s, t);
          rowOrder.push(rc.tr);
        }
        for (const [k, rc] of pc.rows) {
          if (!rowKeep.has(k)) {
            rc.tr.remove();
            pc.rows.delete(k);
          }
        }
        rowOrder.forEach(function (tr, i) {
          if (pc.tbody.children[i] !== tr) {
            pc.tbody.insertBefore(tr, pc.tbody.children[i] || null);
          }
        });
      }
    }
    for (const [k, pc] of ports) {
      if (!keep.has(k)) {
        pc.card.remove();
        ports.delete(k);
      }
    }
    order.forEach(function (card, i) {
      if (root.children[i] !== card) {
        root.insertBefore(card, root.children[i] || null);
      }
    });
    if (v.clusters.length === 0) {
      root.textContent = '';
      root.appendChild(el('p', 'muted', 'No cluster is configured (dlbctl cluster add …).'));
    } else {
      const p = root.querySelector(':scope > p');
      if (p) {
        p.remove();
      }
    }
    const notice = document.getElementById('notice');
    notice.hidden = v.servers_listed;
    notice.textContent = v.servers_listed ? '' : v.servers.toLocaleString('en-US') + ' servers are configured, more than the ' +
      v.max_servers.toLocaleString('en-US') + ' this page lists: it shows ports only. dlbctl server report and /metrics have every server.';
  }

  // --- summary, executor, events ---

  function card(label, value, title) {
    const c = el('div', 'card');
    c.append(el('div', 'label', label), el('div', 'value', value));
    if (title) {
      c.title = title;
    }
    return c;
  }

  function renderSummary(v, t) {
    let portsN = 0;
    let active = 0;
    let newc = 0;
    for (const cl of v.clusters) {
      for (const p of cl.ports) {
        portsN++;
        active += p.active;
        newc += p.new_connections;
      }
    }
    let fwd = 0;
    for (const r of v.executor.reasons) {
      if (r.reason.startsWith('fwd_')) {
        fwd += r.packets;
      }
    }
    const x = v.executor;
    let exec = 'stopped';
    if (x.loaded) {
      exec = x.attached ? x.interface + ' (' + x.mode + ')' : 'loaded, not attached';
    } else if (x.error) {
      exec = 'error';
    }
    let execTitle = x.error || '';
    if (x.trace) {
      exec += ', tracing';
      execTitle = 'packet trace running: ' + x.trace;
    }
    const root = document.getElementById('summary');
    root.textContent = '';
    root.append(
      card('executor', exec, execTitle),
      card('clusters / ports / servers', v.clusters.length + ' / ' + portsN + ' / ' + fmtInt(v.servers)),
      card('active connections', fmtInt(active)),
      card('new connections/s', fmtRate(track('all:new', newc, t).rate)),
      card('forwarded packets/s', fmtRate(track('all:fwd', fwd, t).rate)),
      card('manager', v.manager.running ? 'running, ' + v.manager.interval + ' s' : 'stopped',
        v.manager.cycles + ' cycles; the last took ' + v.manager.cycle_ms + ' ms'),
      card('configuration changes', fmtInt(v.changes), 'last: ' + new Date(v.last_change).toLocaleString()),
    );
    if (v.ha) {
      const c = card('high availability', haSummary(v.ha), 'role ' + v.ha.role);
      c.id = 'ha-card';
      root.appendChild(c);
    }
    if (v.bgp) {
      const up = v.bgp.neighbors.filter(function (n) { return n.state === 'established'; }).length;
      const ann = v.bgp.clusters.filter(function (c) { return c.announced; }).length;
      root.appendChild(card('BGP', up + ' of ' + v.bgp.neighbors.length + ' sessions up · ' + ann + ' of ' + v.bgp.clusters.length + ' announced'));
    }
    if (v.dropping) {
      const c = card('dropped lately', fmtInt(v.dropping_packets) + ' in ' + v.dropping_seconds + ' s', v.dropping);
      c.id = 'dropping-card';
      c.classList.add('warn');
      root.appendChild(c);
    }
    if (v.warnings.length > 0) {
      const c = card('warnings', String(v.warnings.length), 'see Warnings below');
      c.classList.add('warn');
      root.appendChild(c);
    }
  }

  function renderReasons(v, t) {
    const tbody = document.querySelector('#reasons tbody');
    tbody.textContent = '';
    for (const r of v.executor.reasons) {
      const tr = el('tr', r.packets === 0 ? 'zero' : '');
      tr.dataset.reason = r.reason;
      tr.append(el('td', '', r.reason), el('td', 'num', fmtRate(track('r:' + r.reason, r.packets, t).rate)),
        el('td', 'num', fmtInt(r.packets)), el('td', 'num', fmtBytes(r.bytes)));
      tbody.appendChild(tr);
    }
    if (v.executor.reasons.length === 0) {
      const tr = el('tr');
      const td = el('td', 'muted', 'The executor is not loaded.');
      td.colSpan = 4;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
  }

  function renderTables(v) {
    const root = document.getElementById('tables');
    root.textContent = '';
    for (const tb of v.executor.tables) {
      const share = tb.limit > 0 ? tb.entries / tb.limit : 0;
      const f = el('div', 'fill');
      f.append(el('div', '', tb.name + ': ' + fmtInt(tb.entries) + ' of ' + fmtInt(tb.limit) + ' (' + (100 * share).toFixed(1) + ' %)'));
      const bar = el('div', 'bar');
      const inner = el('div', share > 0.8 ? 'high' : '');
      inner.style.width = Math.min(100, 100 * share).toFixed(1) + '%';
      bar.appendChild(inner);
      f.appendChild(bar);
      root.appendChild(f);
    }
    if (v.executor.tables.length === 0) {
      root.appendChild(el('p', 'muted', 'The executor is not loaded.'));
    }
  }

  // --- warnings, high availability, BGP ---

  // MAXROWS bounds the rows of a list that may hold every cluster.
  const MAXROWS = 20;

  // someOf names the first n of a list, and how many more there are.
  function someOf(list, n) {
    if (list.length <= n) {
      return list.join(', ');
    }
    return list.slice(0, n).join(', ') + ' and ' + fmtInt(list.length - n) + ' more (' + fmtInt(list.length) + ' in all)';
  }

  function badge(text, cls) {
    return el('span', 'state ' + cls, text);
  }

  function since(t) {
    const d = Date.parse(t);
    return d > 0 ? new Date(d).toLocaleString() : '–';
  }

  function renderWarnings(v) {
    const root = document.getElementById('warnings');
    const list = document.getElementById('warning-list');
    list.textContent = '';
    if (v.dropping) {
      list.appendChild(el('li', 'dropping', v.dropping));
    }
    for (const w of v.warnings) {
      list.appendChild(el('li', '', w));
    }
    root.hidden = v.warnings.length === 0 && !v.dropping;
    root.title = 'read ' + new Date(v.warnings_at).toLocaleTimeString() + ' (every few seconds)';
  }

  // haSummary says in a few words whether this dispatcher serves, for the
  // summary's card.
  function haSummary(ha) {
    if (!ha.running) {
      return 'not running';
    }
    return ha.groups.map(function (g) {
      let s = (ha.groups.length > 1 ? g.group + ' ' : '') + g.state;
      if (g.state === 'standby') {
        s += g.synced ? ', synced' : ', not synced';
      }
      return s;
    }).join(' · ') + (ha.peer.alive ? '' : ' · peer lost');
  }

  function renderHA(v) {
    const root = document.getElementById('ha');
    const ha = v.ha;
    root.hidden = !ha;
    if (!ha) {
      return;
    }
    const self = document.getElementById('ha-self');
    self.textContent = 'This dispatcher: role ' + ha.role + ', recovery ' + ha.recovery + ' · ';
    if (!ha.running) {
      self.append(badge('not running', 'no'), document.createTextNode(' ' + (ha.error || '')));
    } else if (ha.healthy) {
      self.append(badge('healthy', 'yes'));
    } else {
      self.append(badge('cannot forward', 'no'), document.createTextNode(' ' + (ha.health_reason || '')));
    }
    const tbody = document.querySelector('#ha-groups tbody');
    tbody.textContent = '';
    for (const g of ha.groups) {
      const tr = el('tr');
      tr.dataset.group = g.group;
      tr.dataset.state = g.state;
      const st = el('td');
      st.appendChild(badge(g.state, g.state));
      if (g.reason) {
        st.title = g.reason;
      }
      tr.append(el('td', '', g.group), st, el('td', '', since(g.since)),
        el('td', '', g.synced ? 'full copy' : (g.state === 'active' ? '–' : 'no full copy')),
        el('td', 'wrap', g.clusters.length ? someOf(g.clusters, 8) : 'none'));
      tbody.appendChild(tr);
    }
    const peer = document.getElementById('ha-peer');
    peer.textContent = 'Peer: ';
    const p = ha.peer;
    if (p.alive) {
      peer.append(badge('alive', 'yes'), document.createTextNode(' ' + p.role + ', ' + (p.healthy ? 'healthy' : 'cannot forward') +
        ', reaches ' + p.reach + ' of ' + p.targets + ' targets, ' +
        (p.same_config ? 'the same configuration' : 'a DIFFERENT configuration (its clusters, ports or servers differ)') +
        (p.conflict ? '; ' + p.conflict : '')));
    } else {
      peer.append(badge('not heard', 'no'), document.createTextNode(p.heard ? ' since ' + since(p.last_heard) : ' since dlbd started'));
    }
    if (ha.stray.length > 0) {
      peer.append(document.createTextNode('; its heartbeats arrive on a path this dispatcher lacks (' + ha.stray.join(', ') +
        '): the two dispatchers\' heartbeat paths differ'));
    }
    peer.dataset.alive = p.alive;
    const reach = document.getElementById('ha-reach');
    reach.textContent = ha.reach.length === 0 ? 'No reach target.' : 'Reach targets: ' + ha.reach.map(function (r) {
      return r.address + (r.up ? ' answers' : ' does not answer' + (r.error ? ' (' + r.error + ')' : ''));
    }).join(', ');
  }

  function renderBGP(v) {
    const root = document.getElementById('bgp');
    const b = v.bgp;
    root.hidden = !b;
    if (!b) {
      return;
    }
    const self = document.getElementById('bgp-self');
    self.textContent = 'Speaker: ';
    self.append(b.running ? badge('running', 'yes') : badge('not running', 'no'));
    if (b.error) {
      self.append(document.createTextNode(' ' + b.error));
    }
    const nb = document.querySelector('#bgp-neighbors tbody');
    nb.textContent = '';
    for (const n of b.neighbors) {
      const tr = el('tr');
      tr.dataset.neighbor = n.address;
      tr.dataset.state = n.state;
      const st = el('td');
      st.appendChild(badge(n.state, n.state === 'established' ? 'established' : 'no'));
      tr.append(el('td', '', n.address), st, el('td', '', n.state === 'established' ? since(n.since) : '–'),
        el('td', 'num', fmtInt(n.prefixes_sent)), el('td', '', n.bfd || '–'), el('td', 'reason', n.last_error || ''));
      nb.appendChild(tr);
    }
    document.getElementById('bgp-neighbors').hidden = b.neighbors.length === 0;
    const cl = document.querySelector('#bgp-clusters tbody');
    cl.textContent = '';
    // The withdrawn first (they are what may need attention), and at
    // most MAXROWS: a row per cluster of thousands kept the page busy.
    const withdrawn = b.clusters.filter(function (c) { return !c.announced; });
    const shown = withdrawn.concat(b.clusters.filter(function (c) { return c.announced; })).slice(0, MAXROWS);
    for (const c of shown) {
      const tr = el('tr');
      tr.dataset.cluster = c.address;
      tr.dataset.announced = c.announced;
      const st = el('td');
      st.appendChild(c.announced ? badge('announced', 'yes') : badge('withdrawn', 'no'));
      if (!c.announced) {
        st.appendChild(document.createTextNode(' ' + c.reason));
      }
      tr.append(el('td', '', c.address), st);
      cl.appendChild(tr);
    }
    if (b.clusters.length > shown.length) {
      const more = b.clusters.length - shown.length;
      const td = el('td', 'muted', 'and ' + fmtInt(more) + ' more (' + fmtInt(b.clusters.length) + ' in all, ' +
        fmtInt(withdrawn.length) + ' withdrawn): dlbctl bgp report lists them all');
      td.colSpan = 2;
      const tr = el('tr');
      tr.dataset.more = more;
      tr.appendChild(td);
      cl.appendChild(tr);
    }
    document.getElementById('bgp-clusters').hidden = b.clusters.length === 0;
  }

  function renderEvents(v) {
    const root = document.getElementById('events');
    root.textContent = '';
    for (const e of v.events) {
      const li = el('li', e.bad ? 'bad' : '');
      li.dataset.event = e.name;
      li.append(el('span', 't', new Date(e.at).toLocaleTimeString()), document.createTextNode(e.text));
      root.appendChild(li);
    }
    if (v.events.length === 0) {
      root.appendChild(el('li', 'muted', 'No event since dlbd started.'));
    }
  }

  function render(v) {
    const t = Date.parse(v.now);
    seen = new Set();
    document.getElementById('version').textContent = 'dlbd ' + v.version;
    renderSummary(v, t);
    renderWarnings(v);
    renderHA(v);
    renderBGP(v);
    renderClusters(v, t);
    renderReasons(v, t);
    renderTables(v);
    renderEvents(v);
    for (const k of series.keys()) {
      if (!seen.has(k)) {
        series.delete(k);
      }
    }
    document.getElementById('updated').textContent = 'updated ' + new Date(t).toLocaleTimeString();
    document.body.dataset.updated = v.now;
  }

  function setLive(ok, why) {
    const live = document.getElementById('live');
    live.textContent = ok ? 'live' : 'disconnected';
    live.classList.toggle('down', !ok);
    live.title = ok ? 'updates every second' : String(why);
  }

  async function poll() {
    let delay = 1000;
    try {
      const r = await fetch('/api/snapshot', { cache: 'no-store' });
      if (!r.ok) {
        throw new Error('dlbd answered ' + r.status + ': ' + (await r.text()));
      }
      const v = await r.json();
      delay = v.interval_ms || delay;
      render(v);
      setLive(true);
    } catch (e) {
      setLive(false, e);
    }
    setTimeout(poll, delay);
  }

  poll();
})();
