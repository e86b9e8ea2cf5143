// Builds, once per run, what the tests need: the Go `rivora` binary (the
// integration tests start real `rivora dev` processes) and this package's
// dist/ (the example script imports the built package by its own name).
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    rivoraBin: string;
  }
}

const run = promisify(execFile);
const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const repoRoot = path.resolve(pkgDir, "../..");

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = await mkdtemp(path.join(tmpdir(), "rivora-sdk-ts-"));
  const bin = path.join(dir, "rivora");
  const go = run("go", ["build", "-o", bin, "./cmd/rivora"], { cwd: repoRoot, maxBuffer: 16 << 20 }).catch((err: unknown) => {
    throw new Error(`go build ./cmd/rivora failed (the integration tests need the Go toolchain): ${describe(err)}`);
  });
  const tsc = run(process.execPath, [path.join(pkgDir, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], { cwd: pkgDir }).catch((err: unknown) => {
    throw new Error(`building dist/ failed: ${describe(err)}`);
  });
  await Promise.all([go, tsc]);
  project.provide("rivoraBin", bin);
  return async () => {
    await rm(dir, { recursive: true, force: true });
  };
}

function describe(err: unknown): string {
  const e = err as { message?: string; stdout?: string; stderr?: string };
  return [e.message, e.stdout, e.stderr].filter(Boolean).join("\n");
}
