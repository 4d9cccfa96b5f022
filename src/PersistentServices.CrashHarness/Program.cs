using System.Runtime.InteropServices;
using PersistentServices.CrashHarness;

// ps-crash-harness: see Options.Usage (or run with --help).
var options = Options.Parse(args, out var error);
if (options is null)
{
    await Console.Error.WriteLineAsync($"ps-crash-harness: {error}{Environment.NewLine}{Environment.NewLine}{Options.Usage}").ConfigureAwait(false);
    return 2;
}

if (options.Help)
{
    Console.WriteLine(Options.Usage);
    return 0;
}

// Ctrl+C or SIGTERM: stop, kill the service, clean up and report, rather than die and leave the service running.
using var interrupted = new CancellationTokenSource();
using var sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, Interrupt);
using var sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Interrupt);

return await new Harness(options).RunAsync(interrupted.Token).ConfigureAwait(false);

void Interrupt(PosixSignalContext context)
{
    context.Cancel = true;
    interrupted.Cancel();
}
