"""Screenshot of the try-it page mid-transcription, for docs/page.png (developer script, not run by the tests).

Starts nothing itself: point it at a running daemon. Headless Chromium plays a corpus clip as its microphone and
uploads another as a file; the picture is taken while the microphone's turn is still in progress (deltas shown,
not yet final) and the file's transcript is in.

    .venv/bin/omnid serve &                     # or make serve
    .venv/bin/python scripts/page_screenshot.py --url http://127.0.0.1:8000 --out docs/page.png
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "audio" / "en"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--mic", type=Path, default=CORPUS / "jfk_inaugural_excerpt.flac")
    ap.add_argument("--file", type=Path, default=CORPUS / "ljspeech_LJ001-0009.flac")
    ap.add_argument("--out", type=Path, default=Path("docs/page.png"))
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = ap.parse_args()
    options = Options()
    options.binary_location = args.chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,1250", "--hide-scrollbars",
                "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={args.mic}%noloop"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=args.chromedriver))
    try:
        wait = WebDriverWait(driver, 60, poll_frequency=0.1)
        driver.get(args.url + "/")
        wait.until(lambda d: "healthy" in d.find_element(By.ID, "health").text)
        driver.find_element(By.ID, "file-input").send_keys(str(args.file.resolve()))
        wait.until(lambda d: not d.find_element(By.ID, "copy").get_attribute("disabled"))
        driver.find_element(By.ID, "mic-toggle").click()
        # A first final line, then the next turn's deltas still coming in.
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#mic-transcript p.final")
                   and d.find_elements(By.CSS_SELECTOR, "#mic-transcript p.partial")
                   and d.find_element(By.CSS_SELECTOR, "#mic-transcript p.partial").text.count(" ") >= 2)
        time.sleep(0.2)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print(f"saved {args.out}")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
