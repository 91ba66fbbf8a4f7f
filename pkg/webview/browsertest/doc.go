// Package browsertest is a small harness for tests that drive the web view
// (pkg/webview) in a real, headless Chromium through the DevTools protocol
// (github.com/chromedp/chromedp).
//
// It owns:
//
//   - finding and starting one headless Chromium for each call of [Start]
//     (no sandbox, because the tests run as root, no GPU, a fixed window of
//     1400x1000), and stopping it, and its temporary profile, when the test
//     ends;
//   - one tab for each call of [Browser.Open], and what the tab saw: every
//     console error, uncaught exception, failed request and HTTP error
//     response of the page, kept as text for [Page.Errors];
//   - a few plain steps on a page: [Page.Eval], [Page.WaitFor],
//     [Page.Click] and [Page.Screenshot], each with a time limit, each
//     failing the test with a message that says what it was doing.
//
// It never:
//
//   - skips a test: without a browser, [Start] fails the test and says to
//     install Debian's chromium;
//   - downloads or installs a browser, or opens a visible window;
//   - judges a page: errors are collected, and the caller decides which of
//     them fail its test;
//   - retries an action, or shares a browser between tests;
//   - serves anything: the caller starts its own server (for example
//     net/http/httptest) and gives its URL to [Browser.Open].
package browsertest
