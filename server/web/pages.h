// The web pages of `tnmt serve`, embedded in the binary: each is one self-contained HTML
// document (inline CSS and JavaScript, no external resources). Generated from index.html and
// jobs.html in this directory by the genrule //server/web:pages_cc.
#pragma once

namespace tnmt::server::web {

// GET /: translate text with a served model (uses /api/models and /api/translate).
extern const char kIndexHtml[];
// GET /jobs: training jobs and their loss curves (uses /api/jobs and /api/jobs/{id}/events).
extern const char kJobsHtml[];

}  // namespace tnmt::server::web
