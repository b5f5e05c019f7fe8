// validate.mjs — checks Kubernetes YAML files offline against Kubernetes'
// own schemas (npm's kubernetes-models: the API's OpenAPI definitions
// compiled into validators), and prints the parsed documents as JSON for
// tests/deploy/test_deploy.py to check what they say.
//
//   node tests/deploy/validate.mjs FILE.yaml...
//
// Each document is validated as its kind (v1 Service, batch/v1 Job). Two
// checks are added to the schemas':
// - unknown fields: the schemas accept fields they do not define (the API
//   server would drop or refuse them); every object is watched while it is
//   validated (a Proxy), and any own field the validator never read is
//   refused — the validators read every field their schema defines and
//   walk every entry of a map.
// - JobSet (jobset.x-k8s.io/v1alpha2) is a custom resource whose schema
//   kubernetes-models does not carry: its own fields are checked here by
//   hand (the ones these files use, with their types), and each
//   replicatedJob's template is validated as a batch/v1 JobTemplateSpec
//   (its pod template as a PodTemplateSpec within it).
//
// Output: {"files": {FILE: [documents]}, "errors": ["FILE: doc N (Kind name): ..."]};
// exit 0 with no errors, 1 with some, 2 on a usage error.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");

// The compiled validator of one schema (kubernetes-models' own, or
// apimachinery's for the meta types).
async function validator(name) {
  const pkg = name.startsWith("IoK8sApimachinery") ? "@kubernetes-models/apimachinery" : "kubernetes-models";
  const m = await import(pathToFileURL(join(modules, pkg, "_schemas", name + ".mjs")).href);
  return m.validate;
}

const KINDS = {
  "v1/Service": "IoK8sApiCoreV1Service",
  "batch/v1/Job": "IoK8sApiBatchV1Job",
};

// A deep copy of v in which every object and array is a Proxy recording the
// keys read; `seen` maps each copied object to its set of keys read.
function watched(v, path, seen, all) {
  if (v === null || typeof v !== "object") return v;
  const copy = Array.isArray(v) ? [] : {};
  for (const k of Object.keys(v)) copy[k] = watched(v[k], path + "/" + k, seen, all);
  const reads = new Set();
  all.push({ path, obj: copy, reads, isArray: Array.isArray(v) });
  const p = new Proxy(copy, {
    get(t, k, r) {
      if (typeof k === "string") reads.add(k);
      return Reflect.get(t, k, r);
    },
  });
  seen.set(p, reads);
  return p;
}

// Errors of validating doc with fn: the schema's, then unknown fields.
function check(fn, doc, where) {
  const all = [];
  const data = watched(doc, "", new Map(), all);
  const errors = [];
  if (!fn(data)) {
    for (const e of fn.errors || [])
      errors.push(`${where}${e.instancePath || "/"}: ${e.message || e.keyword}${e.params ? " " + JSON.stringify(e.params) : ""}`);
  }
  for (const { path, obj, reads, isArray } of all) {
    if (isArray) continue;
    for (const k of Object.keys(obj))
      if (!reads.has(k)) errors.push(`${where}${path}/${k}: not a field of this object in Kubernetes' schema`);
  }
  return errors;
}

// JobSet v1alpha2's own fields (sigs.k8s.io/jobset), checked by hand.
function checkObject(o, where, fields, errors) {
  if (o === null || typeof o !== "object" || Array.isArray(o)) {
    errors.push(`${where}: must be an object`);
    return false;
  }
  for (const k of Object.keys(o)) {
    const t = fields[k];
    if (!t) {
      errors.push(`${where}/${k}: not a field of this JobSet object`);
      continue;
    }
    const v = o[k];
    const ok = typeof t === "function" ? t(v, `${where}/${k}`) :
      t === "int" ? Number.isInteger(v) && v >= 0 :
      t === "bool" ? typeof v === "boolean" :
      t === "string" ? typeof v === "string" && v.length > 0 :
      Array.isArray(t) ? t.includes(v) : false;
    if (!ok) errors.push(`${where}/${k}: ${JSON.stringify(v)} is not ${Array.isArray(t) ? "one of " + t.join(", ") : typeof t === "function" ? "valid" : "a " + t}`);
  }
  return true;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

async function checkJobSet(doc, where) {
  const errors = [];
  const jobTemplate = await validator("IoK8sApiBatchV1JobTemplateSpec");
  const meta = await validator("IoK8sApimachineryPkgApisMetaV1ObjectMeta");
  for (const k of Object.keys(doc))
    if (!["apiVersion", "kind", "metadata", "spec"].includes(k)) errors.push(`${where}/${k}: not a field of JobSet`);
  if (!doc.metadata || typeof doc.metadata.name !== "string" || !DNS_LABEL.test(doc.metadata.name))
    errors.push(`${where}/metadata/name: a DNS label is required`);
  const spec = doc.spec;
  const names = [];
  checkObject(spec, `${where}/spec`, {
    network: (v, w) => checkObject(v, w, { enableDNSHostnames: "bool", subdomain: "string", publishNotReadyAddresses: "bool" }, errors),
    failurePolicy: (v, w) => checkObject(v, w, { maxRestarts: "int" }, errors),
    successPolicy: (v, w) => checkObject(v, w, {
      operator: ["All", "Any"],
      targetReplicatedJobs: (t) => Array.isArray(t) && t.every((x) => typeof x === "string"),
    }, errors),
    startupPolicy: (v, w) => checkObject(v, w, { startupPolicyOrder: ["AnyOrder", "InOrder"] }, errors),
    suspend: "bool",
    ttlSecondsAfterFinished: "int",
    replicatedJobs: (v, w) => {
      if (!Array.isArray(v) || v.length === 0) return false;
      v.forEach((rj, i) => {
        const rw = `${w}/${i}`;
        checkObject(rj, rw, {
          name: (n) => typeof n === "string" && DNS_LABEL.test(n),
          replicas: (n) => Number.isInteger(n) && n >= 1,
          template: () => true,
        }, errors);
        if (!rj.name) errors.push(`${rw}/name: required`);
        if (!rj.template) errors.push(`${rw}/template: required`);
        else errors.push(...check(jobTemplate, rj.template, `${rw}/template`));
        names.push(rj.name);
      });
      return true;
    },
  }, errors);
  if (!spec || !Array.isArray(spec.replicatedJobs)) errors.push(`${where}/spec/replicatedJobs: required`);
  if (new Set(names).size !== names.length) errors.push(`${where}/spec/replicatedJobs: names must differ`);
  errors.push(...check(meta, doc.metadata || {}, `${where}/metadata`));
  return errors;
}

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node validate.mjs FILE.yaml...");
    process.exit(2);
  }
  const out = { files: {}, errors: [] };
  for (const file of files) {
    const docs = parseAllDocuments(readFileSync(file, "utf8"));
    out.files[file] = [];
    let n = 0;
    for (const d of docs) {
      n++;
      if (d.errors.length) {
        out.errors.push(`${file}: doc ${n}: YAML: ${d.errors.map((e) => e.message).join("; ")}`);
        continue;
      }
      const doc = d.toJS();
      if (doc === null || doc === undefined) continue;
      out.files[file].push(doc);
      const where = `${file}: doc ${n} (${doc.kind} ${doc.metadata && doc.metadata.name})`;
      const key = `${doc.apiVersion}/${doc.kind}`;
      if (KINDS[key]) out.errors.push(...check(await validator(KINDS[key]), doc, where + " "));
      else if (key === "jobset.x-k8s.io/v1alpha2/JobSet") out.errors.push(...(await checkJobSet(doc, where + " ")));
      else out.errors.push(`${where}: ${key} is not a kind this check knows`);
    }
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(out.errors.length ? 1 : 0);
}

main(process.argv.slice(2)).catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(2);
});
