#!/bin/bash
# Run by the trainer container of every node pod, with the TrainJob's command as its arguments.
# It starts this node's Flux broker from the Flux that the flux-installer init container copied
# to /mnt/flux. The lead broker, on the first node ({{.LeadHost}}), runs the command across the
# cluster with flux run, and the cluster stops when it ends; the other brokers follow it. Written
# by the TrainJob operator for TrainJob {{.TrainJob}}.

viewbase=/mnt/flux
viewroot=${viewbase}/view
viewbin=${viewroot}/bin
configroot=${viewbase}/config
cfg=${configroot}/etc/flux/config

# Flux's programs come after the image's own, so that the image's (Python, MPI) win.
export PATH=$PATH:${viewbin}

# The view links into /opt/software, as it did in the view image.
cp -R ${viewbase}/software/* /opt/software/

# Flux runs with the Python it was built with.
foundroot=$(find ${viewroot} -maxdepth 2 -type d -path "${viewroot}/lib/python3*" 2>/dev/null)
pythonversion=${viewroot}/bin/$(basename "${foundroot}")
echo "Flux's Python: ${pythonversion} (${foundroot})"
if [[ -f "${pythonversion}" ]]; then
  rm -rf ${viewroot}/bin/python3 ${viewroot}/bin/python
  ln -s ${pythonversion} ${viewroot}/lib/python || true
  ln -s ${pythonversion} ${viewroot}/lib/python3 || true
fi
export PYTHONPATH=${PYTHONPATH:-""}:${foundroot}/site-packages
export FLUX_RC_EXTRA=${viewroot}/etc/flux/rc1.d

# For the command: `source /mnt/flux/flux-view.sh` gives Flux's environment, and
# /mnt/flux/load-fluxion.sh replaces Flux's simple scheduler with Fluxion.
cat > ${viewbase}/load-fluxion.sh << HELPER
flux module remove sched-simple
flux module load sched-fluxion-resource
flux module load sched-fluxion-qmanager
HELPER
cat > ${viewbase}/flux-view.sh << HELPER
#!/bin/bash
export PATH=$PATH
export PYTHONPATH=$PYTHONPATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-""}:${viewroot}/lib
export fluxsocket=local://${configroot}/run/flux/local
HELPER

# The cluster's CURVE certificate, readable by this user only, as Flux requires.
curvepath=${configroot}/etc/curve/curve.cert
cp /curve/curve.cert ${curvepath}
chmod g-r,o-r ${curvepath}
chown -R $(id -u) ${curvepath}

# The cluster's resources: every host, with its cores (one per task) and GPUs.
hosts=$(cat ${configroot}/etc/flux/system/hostlist)
flux R encode --hosts=${hosts} {{.Resources}} > /tmp/R
mv /tmp/R ${configroot}/etc/flux/system/R

export STATE_DIR=${configroot}/var/lib/flux
export FLUX_OUTPUT_DIR=/tmp/fluxout
mkdir -p ${STATE_DIR} ${FLUX_OUTPUT_DIR} ${configroot}/etc/flux/system/cron.d
brokerOptions="-Scron.directory=${configroot}/etc/flux/system/cron.d \
  -Stbon.fanout=256 \
  -Srundir=${configroot}/run/flux \
  -Sstatedir=${STATE_DIR} \
  -Slocal-uri=local://${configroot}/run/flux/local \
  -Slog-stderr-level=0 \
  -Slog-stderr-mode=local"

status=0
if [ "$(hostname)" = "{{.LeadHost}}" ]; then
  if [ $# -eq 0 ]; then
    # No command: an interactive Flux cluster, which runs until the TrainJob is deleted.
    echo "flux broker --config-path ${cfg} ${brokerOptions}"
    flux broker --config-path ${cfg} ${brokerOptions}
    status=$?
  else
    flags="{{.Flags}}"
    echo "flux start -o --config ${cfg} ${brokerOptions} flux run ${flags} $*"
    flux start -o --config ${cfg} ${brokerOptions} flux run ${flags} "$@"
    status=$?
  fi
else
  # A follower starts until the lead broker lets it join, and ends when the lead stops the cluster.
  echo "flux start -o --config ${cfg} ${brokerOptions}"
  while true; do
    flux start -o --config ${cfg} ${brokerOptions}
    retval=$?
    if [ ${retval} -eq 0 ]; then
      echo "The follower broker exited cleanly."
      break
    fi
    echo "The follower broker exited with ${retval}: trying again in 15s"
    sleep 15
  done
fi

# Says that this node is done; the pod ends with the training's exit status.
touch ${viewbase}/flux-operator-complete.txt
exit ${status}
