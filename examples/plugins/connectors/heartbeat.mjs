// A connector: the module's default export runs for the life of the
// ConnectorProcess and hands events to the swarm with ctx.emit; the
// Connection's rules route them. Returning would end the process (it is
// restarted like a crashed one), so it loops.
export default async function heartbeat(ctx) {
  const seconds = Number(ctx.config.INTERVAL_SECONDS ?? '60');
  for (let beat = 1; ; beat += 1) {
    const accepted = await ctx.emit({
      name: 'heartbeat',
      message: { type: 'text', text: `heartbeat ${beat}` },
      properties: { beat },
      instanceKey: 'heartbeat',
    });
    ctx.logger.info(`heartbeat ${beat} went to ${accepted.target}`);
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  }
}
