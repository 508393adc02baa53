"""Screenshots of `mt serve`'s page in headless Chromium, on a desktop and a phone width:
the server on 127.0.0.1 with MODEL, a sentence typed, its translation awaited.

    python scripts/screenshot_serve.py runs/bench/tatoeba_cpu --out docs
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from benchkit import serving
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SIZES = {"serve.png": (1100, 720, False), "serve_phone.png": (390, 844, True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--text", default="Where is the train station?\nI like to read books.")
    args = parser.parse_args()
    with serving(args.model, "--device", "cpu") as address, tempfile.TemporaryDirectory() as tmp:
        for name, (width, height, phone) in SIZES.items():
            options = webdriver.ChromeOptions()
            options.binary_location = shutil.which("chromium")
            for flag in ("--headless=new", "--no-sandbox", "--hide-scrollbars"):
                options.add_argument(flag)
            metrics = {"width": width, "height": height, "pixelRatio": 2 if phone else 1}
            options.add_experimental_option("mobileEmulation", {"deviceMetrics": metrics})
            options.add_argument(f"--window-size={width},{height}")
            env = {**os.environ, "TMPDIR": tmp}  # chromium's leftovers go with it
            driver = webdriver.Chrome(options, Service(shutil.which("chromedriver"), env=env))
            try:
                driver.get(f"http://{address}/")
                WebDriverWait(driver, 60).until(
                    lambda d: "step" in d.find_element(By.ID, "model").text
                )
                driver.find_element(By.ID, "source").send_keys(args.text)
                WebDriverWait(driver, 60).until(
                    lambda d: "beam" in d.find_element(By.ID, "status").text
                )
                driver.find_element(By.ID, "source").click()
                args.out.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(args.out / name))
                print(f"wrote {args.out / name}")
            finally:
                driver.quit()


if __name__ == "__main__":
    main()
