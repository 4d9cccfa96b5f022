using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>A logged request and the records it wrote while it ran, read from the log for replay.</summary>
internal sealed record LoadedRequest(LoggedPosition Position, LoggedRequest Record, IReadOnlyList<LogRecord> Aux);
