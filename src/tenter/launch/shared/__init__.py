"""What the launcher and the host agents share: the tagged console, the job's processes, stop
signals, the rendezvous store."""
