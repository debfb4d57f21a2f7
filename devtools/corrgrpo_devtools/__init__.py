"""Dev-only tools of the services, installed by `make install` and never in an image: `python -m
corrgrpo_devtools up` runs the services as local processes (`make serve`); `.docs` writes the READMEs'
configuration lists (`make docs`); `.manifests` and `.ray_config` write the deployment files' per-service
parts (`make manifests`)."""
