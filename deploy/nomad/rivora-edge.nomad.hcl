# Rivora edges: one `rivora edge` on every client node of this (edge) Nomad
# cluster, beside the apps that publish. Each accepts events on port 7500 of
# its node, keeps them on its host volume through WAN cuts, and forwards them
# to the cell's leaf port; it never delivers. An edge's name is its node's:
# keep a node's volume with its name (a wiped volume needs a new name).
#
# The cell's addresses and its cell token come from the Nomad variable
# nomad/jobs/rivora-edge (the cell may be out of this cluster's Consul):
#   nomad var put nomad/jobs/rivora-edge \
#     cell_token=<the cell's token: the cell_token of nomad/jobs/rivora-cell> \
#     cell_leaf=nats-leaf://cell-a.example:7422,nats-leaf://cell-b.example:7422 \
#     controlplane=https://cp-1.example:7300,https://cp-2.example:7300
# The cell's agents open the leaf port with --leaf-listen.
#
# Build with `make build` and serve bin/rivora from your artifact store
# (meta.rivora_artifact_url). Each node needs a host volume "rivora-edge-data"
# with about 1.33 times --max-buffer free (JetStream stores at most three
# quarters of the free disk; the edge refuses to start otherwise).
job "rivora-edge" {
  type = "system"

  group "edge" {
    network {
      port "http" {
        static = 7500
      }
    }

    volume "data" {
      type   = "host"
      source = "rivora-edge-data"
    }

    task "edge" {
      driver = "exec"

      config {
        command = "local/rivora"
        args = ["edge",
          "--name", "${node.unique.name}",
          "--listen", "0.0.0.0:${NOMAD_PORT_http}",
          "--data-dir", "/var/lib/rivora-edge",
          # What the edge may hold while cut off from the cell: past either,
          # Publish is refused (resource_exhausted), nothing is dropped.
          "--max-buffer", "10GiB",
          "--buffer-max-age", "72h",
          "--cell-token-file", "${NOMAD_SECRETS_DIR}/cell.token",
        ]
      }

      # The cell token: the cell's own secret, which opens the edge's calls
      # to the control plane and derives its leaf credential.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/rivora-edge" }}{{ .cell_token }}{{ end }}
        EOT
        destination = "secrets/cell.token"
        perms       = "0600"
        # A new cell token is rolled through by hand (docs/security.md:
        # The cell token), not by restarting every edge at once.
        change_mode = "noop"
      }

      # The cell's leaf ports and control planes (RIVORA_EDGE_CELL_LEAF and
      # RIVORA_CONTROLPLANE take comma-separated lists).
      template {
        data        = <<-EOT
          RIVORA_EDGE_CELL_LEAF={{ with nomadVar "nomad/jobs/rivora-edge" }}{{ .cell_leaf }}{{ end }}
          RIVORA_CONTROLPLANE={{ with nomadVar "nomad/jobs/rivora-edge" }}{{ .controlplane }}{{ end }}
        EOT
        destination = "local/cell.env"
        env         = true
        change_mode = "restart"
      }

      artifact {
        source = "${meta.rivora_artifact_url}"
      }

      volume_mount {
        volume      = "data"
        destination = "/var/lib/rivora-edge"
      }

      # SIGTERM stops the edge cleanly; what it acknowledged is on disk
      # either way.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      service {
        name = "rivora-edge"
        port = "http"
        check {
          type     = "http"
          path     = "/healthz"
          interval = "5s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
