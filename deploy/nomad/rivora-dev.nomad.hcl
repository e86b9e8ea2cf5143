# A single-node Rivora for a test environment: control plane and agent in
# one process on embedded defaults (see `rivora dev --help`). A production
# cell (control planes, agents, Consul) is rivora-cell.nomad.hcl.
job "rivora-dev" {
  type = "service"

  group "rivora" {
    count = 1

    network {
      port "http" {
        static = 7400
      }
    }

    volume "data" {
      type   = "host"
      source = "rivora-data"
    }

    task "rivora" {
      driver = "exec"

      config {
        command = "local/rivora"
        args    = ["dev", "--listen", "0.0.0.0:${NOMAD_PORT_http}", "--data-dir", "/var/lib/rivora"]
      }

      artifact {
        # Build with `make build` and serve bin/rivora from your artifact store.
        source = "${meta.rivora_artifact_url}"
      }

      volume_mount {
        volume      = "data"
        destination = "/var/lib/rivora"
      }

      # SIGTERM drains in-flight deliveries before exit.
      kill_signal  = "SIGTERM"
      kill_timeout = "45s"

      service {
        name = "rivora"
        port = "http"
        check {
          type     = "http"
          path     = "/healthz"
          interval = "5s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 2000
        memory = 2048
      }
    }
  }
}
