#!/bin/bash
# Run by the flux-installer init container of every node pod, from the Flux view image. It copies
# Flux (a Spack view) into the flux-install volume, which the trainer container mounts at
# /mnt/flux, and writes the Flux cluster's configuration beside it. Written by the TrainJob
# operator for TrainJob {{.TrainJob}}.

viewroot=/mnt/flux
configroot=${viewroot}/config
echo "Installing Flux for $(hostname) into ${viewroot}"
export PATH=/opt/view/bin:$PATH

# The folders the brokers write to: their run and state folders, cron jobs and certificate.
mkdir -p ${configroot}/etc/flux/system/cron.d ${configroot}/etc/flux/config ${configroot}/etc/curve \
  ${configroot}/var/lib/flux ${configroot}/run/flux

# Every host of the cluster, from which the trainer container encodes its resource set.
echo "{{.Hosts}}" > ${configroot}/etc/flux/system/hostlist

# The brokers' configuration. (Written whole, so that a restarted init container writes it once.)
cat > ${configroot}/etc/flux/config/broker.toml << 'BROKER'
{{.BrokerConfig}}BROKER
echo "Broker configuration:"
cat ${configroot}/etc/flux/config/broker.toml

# Flux itself. The view image keeps its Spack view under /opt/views/._view/<hash>, and the view
# links into /opt/software, which the trainer container puts back at that path.
mkdir -p ${viewroot}/view
view=/opt/views/._view/$(ls /opt/views/._view/)
echo "Copying ${view} and /opt/software into ${viewroot}"
cp -R ${view}/* ${viewroot}/view
cp -R /opt/software ${viewroot}/

# Says that the copy is done.
touch ${viewroot}/flux-operator-done.txt
echo "Flux is installed."
