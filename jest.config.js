// Jest configuration of flashsample's test suites (test/*.test.ts, ts-jest).
//
// - ts-jest transpiles without type checking (isolatedModules), which keeps it fast: the types of
//   the suites (and of the lib/ and bench/ files they import) are checked by `tsc --noEmit -p test`
//   (test/tsconfig.json), which `npm test` runs before jest, so a type error fails the run.
// - The distribution tests draw millions of samples on the CPU backend: generous timeouts.
// - test/summary-reporter.js prints, as the very last line of the run,
//   `N passed, N failed, N skipped` (CI parses that line).
/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  moduleFileExtensions: ['ts', 'js', 'json', 'node'],
  transform: {
    '^.+\\.ts$': [
      'ts-jest',
      {
        diagnostics: false,
        tsconfig: {
          isolatedModules: true,
          target: 'ES2022',
          module: 'commonjs',
          esModuleInterop: true,
          strict: true,
          lib: ['ES2022', 'ESNext.Disposable'],
          types: ['node', 'jest'],
        },
      },
    ],
  },
  testTimeout: 180000,
  verbose: true,
  reporters: ['default', '<rootDir>/test/summary-reporter.js'],
};
