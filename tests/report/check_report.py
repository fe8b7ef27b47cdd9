#!/usr/bin/env python3
"""Opens DIR/report.html in headless Chromium (Debian's chromium and chromedriver, driven by
Selenium) and checks, from the DOM, the page against the folder itself as read here with
Python's json: every manifest image is in the gallery with its exact prompt (through every
page), every made image's thumbnail loads, the failed images are listed with the manifest's
reason, each run has a timeline with one lane per rank of its run records and a bar per image,
the summary counts agree, the filter finds what Python's `in` finds, and no prompt or file name
became markup (no script ran, no element came from one). Saves a full-page screenshot.

usage: check_report.py DIR SCREENSHOT.png [--expect-runs N]
"""
import argparse
import glob
import json
import os
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from headless import chromium

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("screenshot")
ap.add_argument("--expect-runs", type=int, required=True)
args = ap.parse_args()

manifest = {}
with open(os.path.join(args.dir, "manifest.jsonl"), encoding="utf-8") as f:
    for line in f:
        rec = json.loads(line)
        manifest[rec["index"]] = rec
records = [json.load(open(p, encoding="utf-8")) for p in sorted(glob.glob(os.path.join(args.dir, ".runs", "*.json")))]
runs = {}
for r in records:
    runs.setdefault(r["run_id"], set()).add(r["rank"])
assert len(runs) == args.expect_runs, f"{len(runs)} runs recorded in .runs, expected {args.expect_runs}"

failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)

driver = chromium()
try:
    driver.get("file://" + os.path.abspath(os.path.join(args.dir, "report.html")))
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    js = driver.execute_script

    # ---- nothing a prompt or file name says became markup or ran ----
    check(js("return window.__pwned === undefined"), "a hostile prompt ran as script")
    check(js("return document.scripts.length") == 2, f"{js('return document.scripts.length')} script elements, expected the page's 2")
    check(not driver.find_elements(By.CSS_SELECTOR, "main b.hostile, main i.hostile, main img.hostile, main [onerror]"),
          "an element from a prompt is in the page")
    check(driver.title == "ditbatch report · " + os.path.basename(os.path.abspath(args.dir)), f"title {driver.title!r}")

    # ---- summary ----
    stats = {e.find_element(By.CLASS_NAME, "k").text: e.find_element(By.CLASS_NAME, "v").text
             for e in driver.find_elements(By.CSS_SELECTOR, "#stats .stat")}
    ok = sorted(i for i, r in manifest.items() if r["status"] == "ok")
    failed = sorted(i for i, r in manifest.items() if r["status"] != "ok")
    check(stats.get("images made") == str(len(ok)), f"images made {stats.get('images made')}, manifest {len(ok)}")
    check(stats.get("failed") == str(len(failed)), f"failed {stats.get('failed')}, manifest {len(failed)}")
    check(stats.get("runs") == str(len(runs)), f"runs {stats.get('runs')}, records {len(runs)}")
    model = {r["model_checksum"] for r in manifest.values()}
    facts = driver.find_element(By.ID, "facts").text
    check(all(c[:16] in facts for c in model), "the model checksum is not in the header")

    # ---- failed images, with the manifest's reason ----
    rows = driver.find_elements(By.CSS_SELECTOR, "#failed tbody tr")
    listed = {int(r.get_attribute("data-index")): r.find_element(By.CLASS_NAME, "reason").text for r in rows}
    check(sorted(listed) == failed, f"failed table {sorted(listed)}, manifest {failed}")
    for i in failed:
        check(listed.get(i) == manifest[i]["error"], f"reason of {i}: {listed.get(i)!r} vs {manifest[i]['error']!r}")

    # ---- timeline: a lane per rank of each run, a bar per image in its rank's lane ----
    for run_id, ranks in runs.items():
        svgs = driver.find_elements(By.CSS_SELECTOR, f'svg.timeline[data-run="{run_id}"]')
        check(len(svgs) == 1, f"run {run_id}: {len(svgs)} timelines")
        if not svgs:
            continue
        lanes = {int(g.get_attribute("data-rank")): g for g in svgs[0].find_elements(By.CSS_SELECTOR, "g.lane")}
        check(set(lanes) == ranks, f"run {run_id}: lanes {sorted(lanes)}, ranks recorded {sorted(ranks)}")
        for i, rec in manifest.items():
            if rec.get("run_id") != run_id:
                continue
            lane = lanes.get(rec["rank"])
            bars = lane.find_elements(By.CSS_SELECTOR, f'g.image[data-index="{i}"]') if lane else []
            check(len(bars) == 1, f"run {run_id}: image {i} has {len(bars)} bars in rank {rec['rank']}'s lane")
        load = svgs[0].find_elements(By.CSS_SELECTOR, "rect.seg-load")
        check(len(load) == len(ranks), f"run {run_id}: {len(load)} load bars for {len(ranks)} ranks")

    # ---- gallery: every image on some page, its prompt shown as the very text ----
    Select(driver.find_element(By.ID, "page-size")).select_by_visible_text("48")
    seen = {}
    while True:
        for card in driver.find_elements(By.CSS_SELECTOR, "#gallery .card"):
            i = int(card.get_attribute("data-index"))
            check(i not in seen, f"image {i} on two pages")
            seen[i] = card.find_element(By.CLASS_NAME, "prompt").get_attribute("textContent")
        nxt = driver.find_element(By.ID, "next")
        if not nxt.is_enabled():
            break
        nxt.click()
    check(sorted(seen) == sorted(manifest), f"gallery {sorted(seen)}, manifest {sorted(manifest)}")
    for i, text in seen.items():
        check(text == manifest[i]["prompt"], f"prompt of {i}: {text!r} vs {manifest[i]['prompt']!r}")

    # every made image's thumbnail is its PNG beside the page (relative, URL-encoded name)
    Select(driver.find_element(By.ID, "page-size")).select_by_visible_text("480")
    for img in driver.find_elements(By.CSS_SELECTOR, "#gallery .card .thumb img"):
        js("arguments[0].scrollIntoView()", img)
        WebDriverWait(driver, 30).until(lambda d: js("return arguments[0].complete", img))
        i = int(js("return arguments[0].closest('.card').dataset.index", img))
        check(js("return arguments[0].naturalWidth", img) == manifest[i]["width"], f"thumbnail of {i} did not load")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#gallery .card .thumb img")) == len(ok), "an <img> per made image")
    js("window.scrollTo(0, 0)")

    # the filter finds what Python's `in` finds (case-folded)
    for query in ("onerror", "harbour", "</script>"):
        box = driver.find_element(By.ID, "filter")
        box.clear()
        box.send_keys(query)
        want = sorted(i for i, r in manifest.items() if query in "\0".join(
            [str(i), r["file"], r["prompt"], r["negative_prompt"], str(r["seed"])]).lower())
        WebDriverWait(driver, 10).until(lambda d: sorted(d.execute_script(
            "return [...document.querySelectorAll('#gallery .card')].map(c => Number(c.dataset.index))")) == want)
    js("arguments[0].value = ''; arguments[0].dispatchEvent(new Event('input'))", box)
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script("return document.querySelectorAll('#gallery .card').length") == len(manifest))
    check(js("return window.__pwned === undefined"), "a hostile prompt ran as script (after paging)")

    # ---- a screenshot of the whole page, for a person to look at ----
    height = js("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(height + 40, 8000))
    js("window.scrollTo(0, 0)")
    driver.save_screenshot(args.screenshot)
    print(f"screenshot: {args.screenshot} (1400 x {min(height + 40, 8000)})")
finally:
    driver.quit()

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print(f"report.html: {len(manifest)} images ({len(failed)} failed), {len(runs)} run(s), lanes "
      + ", ".join(f"{r}: {sorted(k)}" for r, k in runs.items()) + ": every check passed")
