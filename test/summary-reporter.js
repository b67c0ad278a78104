// A jest reporter that prints `N passed, N failed, N skipped` as the very last line of the run
// (CI parses that line).
//
// Counts are test counts. A suite that failed to run at all (a compile error, a throw at module
// load) reports no failed test of its own, so each such suite counts as one failed test: a broken
// file must never read as "0 failed". Skipped = skipped + todo tests.
//
// The line is written synchronously to stdout when the process exits, after everything jest
// prints (including its "did not exit" / "force exiting" notices), so it is always last.
'use strict';

const fs = require('fs');

class SummaryReporter {
  constructor(globalConfig, options) {
    this._line = null;
    this._registered = false;
  }

  onRunComplete(contexts, results) {
    let passed = results.numPassedTests;
    let failed = results.numFailedTests;
    const skipped = results.numPendingTests + (results.numTodoTests || 0);
    for (const suite of results.testResults) {
      if (suite.testExecError || (suite.failureMessage && suite.numFailingTests === 0 && suite.testResults.length === 0)) {
        failed += 1;
      }
    }
    this._line = `${passed} passed, ${failed} failed, ${skipped} skipped`;
    if (!this._registered) {
      this._registered = true;
      process.on('exit', () => {
        if (this._line !== null) fs.writeSync(1, this._line + '\n');
      });
    }
  }
}

module.exports = SummaryReporter;
