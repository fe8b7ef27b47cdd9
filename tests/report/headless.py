"""Debian's headless Chromium driven by Selenium, as every report check opens the page: a fixed
window and scale, so that sizes and screenshots are the same from run to run."""
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def chromium():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
              "--hide-scrollbars", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
