. /opt/miniconda3/bin/activate
