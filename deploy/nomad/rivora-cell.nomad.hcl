# A Rivora cell: two control planes (one leads, by a Consul lock) and three
# agents whose embedded NATS servers form one JetStream cluster (streams
# replicated 3 times). Partition ownership is granted by Consul sessions and
# locks: the Consul agent on each client node is the one the tasks talk to.
# Dead letters go to one S3/MinIO archive shared by the agents.
#
# Build with `make build` and serve bin/rivora from your artifact store
# (meta.rivora_artifact_url). One agent per node (distinct_hosts), each with
# a host volume "rivora-data".
job "rivora-cell" {
  type = "service"

  group "controlplane" {
    count = 2

    network {
      port "http" {
        static = 7300
      }
    }

    task "controlplane" {
      driver = "exec"

      config {
        command = "local/rivora"
        args = ["controlplane",
          "--listen", "0.0.0.0:${NOMAD_PORT_http}",
          "--advertise", "http://${NOMAD_ADDR_http}",
          "--consul", "http://${attr.unique.network.ip-address}:8500",
          "--partitions", "16",
          "--cell-token-file", "${NOMAD_SECRETS_DIR}/cell.token",
        ]
      }

      # The cell token: the secret every control plane and agent of the
      # cell shares, which alone opens their internal services. Make it
      # once: nomad var put nomad/jobs/rivora-cell cell_token=$(openssl rand -hex 32)
      # (with the s3 keys the agents read from the same variable).
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/rivora-cell" }}{{ .cell_token }}{{ end }}
        EOT
        destination = "secrets/cell.token"
        perms       = "0600"
        # A new cell token is rolled through by hand, one allocation at a
        # time (docs/security.md: The cell token), not by restarting every task at once.
        change_mode = "noop"
      }

      artifact {
        source = "${meta.rivora_artifact_url}"
      }

      service {
        name = "rivora-controlplane"
        port = "http"
        check {
          type     = "http"
          path     = "/healthz"
          interval = "5s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }

  group "agent" {
    count = 3

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "http" {
        static = 7400
      }
      port "nats" {
        static = 4222
      }
      port "cluster" {
        static = 6222
      }
    }

    volume "data" {
      type   = "host"
      source = "rivora-data"
    }

    # A deploy restarts the agents one at a time, and the next only once
    # the one before owns partitions again. A restarted agent's /healthz
    # passes within seconds, but the control plane gives it partitions
    # only --rejoin-delay (30 s) after it came back: with Nomad's default
    # min_healthy_time (10 s) the third agent would stop while the first
    # two still wait, leaving every partition without an owner (nothing
    # delivered for ~10 s) and then all on one agent. 45 s outlasts the
    # delay and the partitions' handoff back (docs/operations.md:
    # Upgrading a cell).
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "45s"
      healthy_deadline = "5m"
    }

    # An agent whose disk fills up exits with status 1 (its store was
    # disabled; docs/operations.md: A full disk on an agent): start it
    # again, always. Started on a disk still full it waits for room
    # itself, so it does not crash-loop.
    restart {
      attempts = 10
      interval = "30m"
      delay    = "5s"
      mode     = "delay"
    }

    task "agent" {
      driver = "exec"

      config {
        command = "local/rivora"
        args = ["agent",
          "--name", "${node.unique.name}",
          "--listen", "0.0.0.0:${NOMAD_PORT_http}",
          "--advertise", "http://${NOMAD_ADDR_http}",
          "--controlplane", "${RIVORA_CONTROLPLANE}",
          "--consul", "http://${attr.unique.network.ip-address}:8500",
          "--data-dir", "/var/lib/rivora",
          "--nats-listen", "0.0.0.0:${NOMAD_PORT_nats}",
          "--nats-cluster", "${NOMAD_ADDR_cluster}",
          "--nats-routes", "${RIVORA_NATS_ROUTES}",
          # The cell's dead-letter archive, shared by every agent (the
          # control plane answers dlq and replay through any of them); an
          # agent without one refuses to start. Plain HTTP to a MinIO on
          # the cluster network: drop --s3-insecure for TLS.
          "--s3-endpoint", "${RIVORA_S3_ENDPOINT}",
          "--s3-bucket", "rivora",
          "--s3-insecure",
          "--cell-token-file", "${NOMAD_SECRETS_DIR}/cell.token",
        ]
      }

      # The cell token: the secret every control plane and agent of the
      # cell shares, which alone opens their internal services. Make it
      # once: nomad var put nomad/jobs/rivora-cell cell_token=$(openssl rand -hex 32)
      # (with the s3 keys the agents read from the same variable).
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/rivora-cell" }}{{ .cell_token }}{{ end }}
        EOT
        destination = "secrets/cell.token"
        perms       = "0600"
        # A new cell token is rolled through by hand, one allocation at a
        # time (docs/security.md: The cell token), not by restarting every task at once.
        change_mode = "noop"
      }

      # The cell's other agents (their cluster ports), the control planes
      # and the archive (a MinIO or S3 gateway registered as the Consul
      # service rivora-minio; its keys in the Nomad variable
      # nomad/jobs/rivora-cell: s3_access_key, s3_secret_key), from Consul's
      # catalog. NATS gossips the rest of the cell once
      # one route is up; the agent follows whichever control plane leads
      # (followers answer Unavailable and it moves to the next).
      template {
        data        = <<-EOT
          RIVORA_NATS_ROUTES={{ range $i, $s := service "rivora-nats-cluster" }}{{ if $i }},{{ end }}nats://{{ .Address }}:{{ .Port }}{{ end }}
          RIVORA_CONTROLPLANE={{ range $i, $s := service "rivora-controlplane" }}{{ if $i }},{{ end }}http://{{ .Address }}:{{ .Port }}{{ end }}
          RIVORA_S3_ENDPOINT={{ range $i, $s := service "rivora-minio" }}{{ if eq $i 0 }}{{ .Address }}:{{ .Port }}{{ end }}{{ end }}
          RIVORA_S3_ACCESS_KEY={{ with nomadVar "nomad/jobs/rivora-cell" }}{{ .s3_access_key }}{{ end }}
          RIVORA_S3_SECRET_KEY={{ with nomadVar "nomad/jobs/rivora-cell" }}{{ .s3_secret_key }}{{ end }}
        EOT
        destination = "local/cell.env"
        env         = true
        change_mode = "noop"
      }

      artifact {
        source = "${meta.rivora_artifact_url}"
      }

      volume_mount {
        volume      = "data"
        destination = "/var/lib/rivora"
      }

      # SIGTERM hands the agent's partitions off (attempts in flight finish,
      # locks are released) before exit. The agent stops taking publishes
      # at the signal: shutdown_delay takes it out of Consul's catalog
      # (the rivora-agent service, which load balancers follow) that long
      # before, while it still stores what it is sent.
      kill_signal    = "SIGTERM"
      kill_timeout   = "45s"
      shutdown_delay = "5s"

      service {
        name = "rivora-agent"
        port = "http"
        check {
          type     = "http"
          path     = "/healthz"
          interval = "5s"
          timeout  = "2s"
        }
      }

      service {
        name = "rivora-nats-cluster"
        port = "cluster"
      }

      resources {
        cpu    = 1000
        memory = 1024
      }
    }
  }
}
