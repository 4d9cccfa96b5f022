namespace PersistentServices;

/// <summary>
/// The former name of <see cref="PersistentReadOnlyAttribute"/>, kept so existing code compiles: it clashes with
/// <see cref="System.ComponentModel.ReadOnlyAttribute"/> in files that import both namespaces. It means exactly what
/// <see cref="PersistentReadOnlyAttribute"/> means, to the runtime and to the analyzers.
/// </summary>
[Obsolete("Use [PersistentReadOnly] (PersistentServices.PersistentReadOnlyAttribute): [ReadOnly] clashes with System.ComponentModel.ReadOnlyAttribute.")]
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class ReadOnlyAttribute : Attribute
{
}
