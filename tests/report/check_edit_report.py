#!/usr/bin/env python3
"""Opens DIR/report.html of an edit run in headless Chromium and checks, from the DOM, that each
image made from input images shows them beside its output: one thumbnail per input the
manifest line lists, in its order, each linking to the file the run read (the path as recorded,
under the folder the run's record in DIR/.runs gives for a relative one), loaded, and placed
to the left of the output at the same height. Saves a screenshot of the gallery.

usage: check_edit_report.py DIR SCREENSHOT.png
"""
import glob
import json
import os
import sys
from urllib.parse import unquote, urlparse

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from headless import chromium

out = os.path.abspath(sys.argv[1])
manifest = {}
with open(os.path.join(out, "manifest.jsonl"), encoding="utf-8") as f:
    for line in f:
        rec = json.loads(line)
        manifest[rec["index"]] = rec
folders = {}
for p in glob.glob(os.path.join(out, ".runs", "*.json")):
    r = json.load(open(p, encoding="utf-8"))
    if "inputs_folder" in r:
        folders[r["run_id"]] = r["inputs_folder"]
edits = {i: r for i, r in manifest.items() if r.get("input_images")}
assert edits, "no manifest line lists input images"

failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)

def expected_file(rec, path):
    return path if path.startswith("/") else os.path.normpath(os.path.join(folders[rec["run_id"]], path))

driver = chromium()
try:
    driver.get("file://" + os.path.join(out, "report.html"))
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    js = driver.execute_script
    check(len(driver.find_elements(By.CSS_SELECTOR, "#gallery .card.edit")) == len(edits),
          f"{len(driver.find_elements(By.CSS_SELECTOR, '#gallery .card.edit'))} edit cards, manifest {len(edits)}")
    for i, rec in edits.items():
        card = driver.find_element(By.CSS_SELECTOR, f'#gallery .card[data-index="{i}"]')
        output = card.find_element(By.CSS_SELECTOR, ".thumb img")
        inputs = card.find_elements(By.CSS_SELECTOR, ".inputs a.input img")
        want = [expected_file(rec, image["path"]) for image in rec["input_images"]]
        got = [unquote(urlparse(img.get_attribute("src")).path) for img in inputs]
        check(got == want, f"image {i}: inputs shown {got}, manifest and run record say {want}")
        out_box = output.rect
        for img in inputs + [output]:
            js("arguments[0].scrollIntoView()", img)
            WebDriverWait(driver, 30).until(lambda d: js("return arguments[0].complete", img))
            check(js("return arguments[0].naturalWidth", img) > 0, f"image {i}: {img.get_attribute('src')} did not load")
        for img in inputs:
            box = img.rect
            check(box["x"] + box["width"] <= out_box["x"] + 1, f"image {i}: an input is not left of the output")
            check(box["y"] < out_box["y"] + out_box["height"] and out_box["y"] < box["y"] + box["height"],
                  f"image {i}: an input is not beside the output")
    js("document.getElementById('gallery').scrollIntoView()")  # the cards, for a person to look at
    driver.save_screenshot(sys.argv[2])
    print(f"screenshot: {sys.argv[2]}")
finally:
    driver.quit()

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print(f"report.html: {len(edits)} edit(s), each with its {sum(len(r['input_images']) for r in edits.values())} "
      "input image(s) in total beside its output: every check passed")
