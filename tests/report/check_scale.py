#!/usr/bin/env python3
"""The run report at 100,000 images: a folder whose manifest repeats the lines of a real run
(SOURCE: its PNGs, run records and timings) up to N images, each with its own index, prompt and
start time, laid end to end in its rank's lane; `ditbatch report` writes the page, and headless
Chromium must show it with one page of the gallery in the DOM (not 100,000 cards), a bounded
number of timeline shapes, every page reachable (the last one holds the last index), and the
filter finding the one image whose prompt is unique. The times are printed, never asserted.

usage: check_scale.py DITBATCH SOURCE_DIR WORK_DIR [N]
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

exe, source, work = sys.argv[1:4]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 100000
os.makedirs(os.path.join(work, ".runs"), exist_ok=True)
lines = [json.loads(l) for l in open(os.path.join(source, "manifest.jsonl"), encoding="utf-8")]
lines = [l for l in lines if l["status"] == "ok" and "run_id" in l]
records = [json.load(open(p)) for p in glob.glob(os.path.join(source, ".runs", "*.json"))]
run = lines[-1]["run_id"]
ranks = sorted(r["rank"] for r in records if r["run_id"] == run)
for r in records:
    if r["run_id"] == run:
        shutil.copy(os.path.join(source, ".runs", f"{run}-rank{r['rank']:05d}.json"), os.path.join(work, ".runs"))
for f in {l["file"] for l in lines}:
    shutil.copy(os.path.join(source, f), work)

def iso(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"

start = min(datetime.strptime(r["loaded"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() for r in records if r["run_id"] == run)
per_lane = (n + len(ranks) - 1) // len(ranks)
with open(os.path.join(work, "manifest.jsonl"), "w", encoding="utf-8") as out:
    for i in range(n):
        line = dict(lines[i % len(lines)])
        rank = ranks[i // per_lane]
        line.update(index=i, rank=rank, run_id=run, prompt=f"scene {i}: " + line["prompt"],
                    started=iso(start + (i % per_lane) * (line["timings"]["total_s"] + line["timings"]["write_s"])))
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
    unique = n // 3
t0 = time.time()
path = subprocess.run([exe, "report", work], check=True, capture_output=True, text=True).stdout.strip()
print(f"ditbatch report: {n} images in {time.time() - t0:.1f} s, {os.path.getsize(path) / 1e6:.1f} MB")

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
try:
    t0 = time.time()
    driver.get("file://" + os.path.abspath(path))
    # a bound for a hung page, far above what a loaded machine needs; not a speed target
    WebDriverWait(driver, 300).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    print(f"chromium: the page drawn in {time.time() - t0:.1f} s")
    js = driver.execute_script
    cards = js("return document.querySelectorAll('#gallery .card').length")
    size = int(js("return document.getElementById('page-size').value"))
    check(cards == size, f"{cards} cards in the DOM, expected one page of {size}")
    check(js("return document.images.length") == size, f"{js('return document.images.length')} <img> in the page")
    shapes = js("return document.querySelectorAll('svg.timeline *').length")
    check(shapes < 50000, f"{shapes} timeline shapes for {n} images")
    print(f"DOM: {cards} cards, {shapes} timeline shapes")
    pages = -(-n // size)
    check(js("return document.getElementById('page-info').textContent") == f"page 1 of {pages}", "page count")
    driver.find_element(By.ID, "last").click()
    last = js("return [...document.querySelectorAll('#gallery .card')].map(c => Number(c.dataset.index))")
    check(last[-1] == n - 1 and len(last) == n - (pages - 1) * size, f"the last page holds {last[:3]}...{last[-3:]}")
    box = driver.find_element(By.ID, "filter")
    box.send_keys(f"scene {unique}:")
    WebDriverWait(driver, 120).until(lambda d: d.execute_script(
        "return [...document.querySelectorAll('#gallery .card')].map(c => Number(c.dataset.index))") == [unique])
finally:
    driver.quit()
if failures:
    sys.exit(1)
print(f"report at {n} images: one page in the DOM, {pages} pages, the filter finds image {unique}")
